//! openraft on glommio (`GlommioRuntime`) against openraft on tokio (`TokioRuntime`, a
//! current-thread runtime with a `LocalSet`): the same three-node cluster, ported from
//! openraft's `raft-kv-memstore-singlethreaded` example (in-memory log and state machine, an
//! in-process router), run on each runtime in turn.
//!
//! Measured per runtime: time from `initialize` to an elected leader; sequential `client_write`
//! latency (p50, p99, max) and rate; and failover, the time from cutting the leader off the
//! router to another node being leader in a higher term (median and max over the trials).
//!
//! ```text
//! cargo run --release -p borges-replication --example runtime_ab -- [writes] [failovers]
//! ```

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_replication::rt::GlommioRuntime;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AsyncRuntime, BasicNode, Entry, EntryPayload, LogId, RaftLogReader, RaftNetwork,
    RaftNetworkFactory, RaftSnapshotBuilder, RaftTypeConfig, SnapshotMeta, StorageError,
    StoredMembership, Vote,
};

openraft::declare_raft_types!(
    /// The example on glommio.
    pub OnGlommio: D = u64, R = u64, AsyncRuntime = GlommioRuntime
);
openraft::declare_raft_types!(
    /// The example on tokio.
    pub OnTokio: D = u64, R = u64, AsyncRuntime = openraft::TokioRuntime
);

/// What the example needs of a type configuration.
trait Cfg:
    RaftTypeConfig<
    D = u64,
    R = u64,
    NodeId = u64,
    Node = BasicNode,
    Entry = Entry<Self>,
    SnapshotData = Cursor<Vec<u8>>,
    Responder = openraft::raft::responder::OneshotResponder<Self>,
>
{
}
impl Cfg for OnGlommio {}
impl Cfg for OnTokio {}

type Err = StorageError<u64>;

/// In-memory log (the example's `LogStore`).
struct LogStore<C: Cfg> {
    vote: RefCell<Option<Vote<u64>>>,
    log: RefCell<BTreeMap<u64, Entry<C>>>,
    purged: RefCell<Option<LogId<u64>>>,
}

impl<C: Cfg> Default for LogStore<C> {
    fn default() -> Self {
        LogStore {
            vote: RefCell::new(None),
            log: RefCell::new(BTreeMap::new()),
            purged: RefCell::new(None),
        }
    }
}

/// Shared handle on the log (a local type, so the storage traits can be implemented for it).
struct Log<C: Cfg>(Rc<LogStore<C>>);

impl<C: Cfg> Clone for Log<C> {
    fn clone(&self) -> Self {
        Log(self.0.clone())
    }
}

impl<C: Cfg> std::ops::Deref for Log<C> {
    type Target = LogStore<C>;
    fn deref(&self) -> &LogStore<C> {
        &self.0
    }
}

impl<C: Cfg> RaftLogReader<C> for Log<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<C>>, Err> {
        Ok(self
            .log
            .borrow()
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl<C: Cfg> RaftLogStorage<C> for Log<C> {
    type LogReader = Self;
    async fn get_log_state(&mut self) -> Result<LogState<C>, Err> {
        let last = self.log.borrow().values().next_back().map(|e| e.log_id);
        let purged = *self.purged.borrow();
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last.or(purged),
        })
    }
    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }
    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), Err> {
        *self.vote.borrow_mut() = Some(*vote);
        Ok(())
    }
    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, Err> {
        Ok(*self.vote.borrow())
    }
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), Err>
    where
        I: IntoIterator<Item = Entry<C>>,
    {
        let mut log = self.log.borrow_mut();
        for e in entries {
            log.insert(e.log_id.index, e);
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }
    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), Err> {
        self.log.borrow_mut().split_off(&log_id.index);
        Ok(())
    }
    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), Err> {
        let mut log = self.log.borrow_mut();
        *log = log.split_off(&(log_id.index + 1));
        *self.purged.borrow_mut() = Some(log_id);
        Ok(())
    }
}

/// Last applied log id, membership, and the sum of the written numbers.
type Applied = (Option<LogId<u64>>, StoredMembership<u64, BasicNode>, u64);

/// In-memory state machine: the sum of the written numbers.
struct Sm<C: Cfg> {
    applied: RefCell<Applied>,
    _c: std::marker::PhantomData<C>,
}

impl<C: Cfg> Default for Sm<C> {
    fn default() -> Self {
        Sm {
            applied: RefCell::new((None, StoredMembership::default(), 0)),
            _c: std::marker::PhantomData,
        }
    }
}

/// Shared handle on the state machine.
struct Machine<C: Cfg>(Rc<Sm<C>>);

impl<C: Cfg> Clone for Machine<C> {
    fn clone(&self) -> Self {
        Machine(self.0.clone())
    }
}

impl<C: Cfg> std::ops::Deref for Machine<C> {
    type Target = Sm<C>;
    fn deref(&self) -> &Sm<C> {
        &self.0
    }
}

impl<C: Cfg> RaftSnapshotBuilder<C> for Machine<C> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<C>, Err> {
        let (last, membership, sum) = self.applied.borrow().clone();
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: membership,
            snapshot_id: format!("{:?}", last),
        };
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(sum.to_le_bytes().to_vec())),
        })
    }
}

impl<C: Cfg> RaftStateMachine<C> for Machine<C> {
    type SnapshotBuilder = Self;
    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), Err> {
        let a = self.applied.borrow();
        Ok((a.0, a.1.clone()))
    }
    async fn apply<I>(&mut self, entries: I) -> Result<Vec<u64>, Err>
    where
        I: IntoIterator<Item = Entry<C>>,
    {
        let mut a = self.applied.borrow_mut();
        let mut out = Vec::new();
        for e in entries {
            a.0 = Some(e.log_id);
            match e.payload {
                EntryPayload::Normal(v) => a.2 += v,
                EntryPayload::Membership(m) => a.1 = StoredMembership::new(Some(e.log_id), m),
                EntryPayload::Blank => {}
            }
            out.push(a.2);
        }
        Ok(out)
    }
    async fn get_snapshot_builder(&mut self) -> Self {
        self.clone()
    }
    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, Err> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), Err> {
        let bytes = snapshot.into_inner();
        let sum = u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
        *self.applied.borrow_mut() = (meta.last_log_id, meta.last_membership.clone(), sum);
        Ok(())
    }
    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<C>>, Err> {
        Ok(None)
    }
}

/// The in-process network: calls the target's `Raft` directly; nodes in `cut` are unreachable.
struct Router<C: Cfg> {
    nodes: RefCell<BTreeMap<u64, openraft::Raft<C>>>,
    cut: RefCell<BTreeSet<u64>>,
}

#[derive(Clone)]
struct Net<C: Cfg> {
    router: Rc<Router<C>>,
    from: u64,
    to: u64,
}

impl<C: Cfg> Net<C> {
    #[allow(clippy::result_large_err)] // openraft's own error type
    fn target<E: std::error::Error>(
        &self,
    ) -> Result<openraft::Raft<C>, RPCError<u64, BasicNode, E>> {
        let cut = self.router.cut.borrow();
        if cut.contains(&self.from) || cut.contains(&self.to) {
            return Err(RPCError::Unreachable(Unreachable::new(
                &std::io::Error::other("cut"),
            )));
        }
        self.router
            .nodes
            .borrow()
            .get(&self.to)
            .cloned()
            .ok_or_else(|| RPCError::Network(NetworkError::new(&std::io::Error::other("gone"))))
    }
}

fn remote<C: Cfg, E: std::error::Error>(
    to: u64,
    e: RaftError<u64, E>,
) -> RPCError<u64, BasicNode, RaftError<u64, E>> {
    RPCError::RemoteError(openraft::error::RemoteError::new(to, e))
}

impl<C: Cfg> RaftNetworkFactory<C> for Net<C> {
    type Network = Net<C>;
    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Net<C> {
        Net {
            router: self.router.clone(),
            from: self.from,
            to: target,
        }
    }
}

impl<C: Cfg> RaftNetwork<C> for Net<C> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let raft = self.target()?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| remote::<C, _>(self.to, e))
    }
    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        let raft = self.target()?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| remote::<C, _>(self.to, e))
    }
    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let raft = self.target()?;
        raft.vote(rpc).await.map_err(|e| remote::<C, _>(self.to, e))
    }
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(50)))
    }
}

/// Figures of one runtime.
#[derive(Debug)]
struct Figures {
    election_ms: f64,
    write_us: (f64, f64, f64),
    writes_per_s: f64,
    failover_ms: (f64, f64),
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn leader_of<C: Cfg>(router: &Router<C>, min_term: u64) -> (u64, u64) {
    let started = Instant::now();
    let mut reported = false;
    loop {
        if !reported && started.elapsed() > Duration::from_secs(5) {
            reported = true;
            for raft in router.nodes.borrow().values() {
                let m = raft.metrics().borrow().clone();
                eprintln!(
                    "stuck: {} {:?} term {} leader {:?} vote {} last {:?}",
                    m.id, m.state, m.current_term, m.current_leader, m.vote, m.last_log_index
                );
            }
        }
        let nodes: Vec<_> = router.nodes.borrow().values().cloned().collect();
        for raft in nodes {
            let m = raft.metrics().borrow().clone();
            let cut = router.cut.borrow().contains(&m.id);
            if !cut && m.state == openraft::ServerState::Leader && m.current_term > min_term {
                return (m.id, m.current_term);
            }
        }
        C::AsyncRuntime::sleep(Duration::from_millis(1)).await;
    }
}

/// Starts three nodes on the router.
async fn start_cluster<C: Cfg>() -> Rc<Router<C>> {
    let router = Rc::new(Router::<C> {
        nodes: RefCell::new(BTreeMap::new()),
        cut: RefCell::new(BTreeSet::new()),
    });
    for id in 1..=3u64 {
        let net = Net {
            router: router.clone(),
            from: id,
            to: 0,
        };
        // Election windows staggered by node (as the replication crate does): openraft 0.9 draws
        // a node's election timeout once, so nodes whose timeouts fall within one tick of each
        // other split the vote round after round.
        let window_ms = 150 + (id - 1) * 100;
        let config = Arc::new(
            openraft::Config {
                heartbeat_interval: 50,
                election_timeout_min: window_ms,
                election_timeout_max: window_ms + 50,
                ..Default::default()
            }
            .validate()
            .expect("valid config"),
        );
        let raft = openraft::Raft::new(
            id,
            config,
            net,
            Log(Rc::new(LogStore::<C>::default())),
            Machine(Rc::new(Sm::<C>::default())),
        )
        .await
        .expect("raft starts");
        router.nodes.borrow_mut().insert(id, raft);
    }
    router
}

/// Sequential writes through `leader`: sorted latencies (us) and the rate.
async fn measure_writes<C: Cfg>(router: &Router<C>, leader: u64, writes: usize) -> (Vec<f64>, f64) {
    let mut lat = Vec::with_capacity(writes);
    let started = Instant::now();
    for _ in 0..writes {
        let raft = router.nodes.borrow()[&leader].clone();
        let t = Instant::now();
        raft.client_write(1).await.expect("write");
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let writes_per_s = writes as f64 / started.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    (lat, writes_per_s)
}

/// Cuts the leader off `failovers` times; sorted times (ms) to the next leader.
async fn measure_failovers<C: Cfg>(
    router: &Router<C>,
    mut leader: u64,
    mut term: u64,
    failovers: usize,
) -> Vec<f64> {
    let mut fo = Vec::with_capacity(failovers);
    for _ in 0..failovers {
        router.cut.borrow_mut().insert(leader);
        let t = Instant::now();
        let (next, next_term) = leader_of(router, term).await;
        fo.push(t.elapsed().as_secs_f64() * 1e3);
        router.cut.borrow_mut().clear();
        // Let the old leader see the new term before the next trial.
        C::AsyncRuntime::sleep(Duration::from_millis(400)).await;
        (leader, term) = (next, next_term);
    }
    fo.sort_by(f64::total_cmp);
    fo
}

async fn run<C: Cfg>(writes: usize, failovers: usize) -> Figures {
    let router = start_cluster::<C>().await;
    let members: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    let started = Instant::now();
    let nodes: Vec<_> = router.nodes.borrow().values().cloned().collect();
    for raft in &nodes {
        let _ = raft.initialize(members.clone()).await;
    }
    let (leader, term) = leader_of(&router, 0).await;
    let election_ms = started.elapsed().as_secs_f64() * 1e3;
    let (lat, writes_per_s) = measure_writes(&router, leader, writes).await;
    let fo = measure_failovers(&router, leader, term, failovers).await;
    for raft in &nodes {
        let _ = raft.shutdown().await;
    }
    Figures {
        election_ms,
        write_us: (
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat[lat.len() - 1],
        ),
        writes_per_s,
        failover_ms: (percentile(&fo, 0.5), fo[fo.len() - 1]),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let writes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let failovers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let glommio = borges_runtime::side::start_side_executor(
        &borges_runtime::side::SideExecutorConfig::default(),
        move || run::<OnGlommio>(writes, failovers),
    )
    .expect("executor")
    .join()
    .expect("thread")
    .expect("runtime");
    let tokio = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio");
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, run::<OnTokio>(writes, failovers))
    };
    for (name, f) in [("glommio", glommio), ("tokio", tokio)] {
        println!(
            "{name:8} election {:6.1} ms | write p50 {:6.1} us p99 {:6.1} us max {:7.1} us, \
             {:7.0} writes/s | failover p50 {:5.1} ms max {:5.1} ms",
            f.election_ms,
            f.write_us.0,
            f.write_us.1,
            f.write_us.2,
            f.writes_per_s,
            f.failover_ms.0,
            f.failover_ms.1
        );
    }
}
