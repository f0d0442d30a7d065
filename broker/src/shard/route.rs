//! Operations that span cores: each part of a request goes to the core that owns it, locally
//! or through that core's outbox, and the answers come back in request order.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use borges_replication::controller::{ControllerRequest, Results};
use borges_runtime::task;
use borges_runtime::time::{self, Instant};
use futures_channel::oneshot;

use super::{Shard, ShardMessage};
use crate::failure::Failure;
use crate::groups::coordinator::{self, check_group_id, GroupMessage, GroupRequest, GroupResponse};
use crate::lifecycle::LifecycleMessage;
use crate::mesh::await_reply;
use crate::metrics::MetricsSnapshot;
use crate::partition::{
    first_of, AppendItem, EpochEnd, EpochEndItem, FetchItem, FetchOutcome, ListOffsetsItem,
    OffsetLookup, PartitionMessage, ProduceAck,
};
use crate::types::{Acks, PartitionRef};

/// Items of a request grouped by owning core, each with its index in the request.
type ByOwner<T> = BTreeMap<usize, (Vec<usize>, Vec<T>)>;

fn by_owner<T>(items: impl IntoIterator<Item = (usize, usize, T)>) -> ByOwner<T> {
    let mut by: ByOwner<T> = BTreeMap::new();
    for (index, owner, item) in items {
        let e = by.entry(owner).or_default();
        e.0.push(index);
        e.1.push(item);
    }
    by
}

/// Per-item results, tagged with each item's index in the request.
pub type Indexed<T> = Vec<(usize, T)>;

type Outcomes = Vec<Result<ProduceAck, Failure>>;
type OutcomesFuture = Pin<Box<dyn Future<Output = Outcomes>>>;

/// The reads of a fetch: per requested partition, its owner and what to read (`None` for a
/// partition already refused), and the long-poll settings.
pub struct FetchPlan {
    /// Per requested partition, in request order.
    pub targets: Vec<Option<(usize, FetchItem)>>,
    /// Bytes to wait for.
    pub min_bytes: u64,
    /// Longest wait for `min_bytes`.
    pub max_wait_ms: u64,
    /// Read into memory instead of returning file ranges.
    pub copy: bool,
}

impl Shard {
    fn count_forwarded(&self) {
        let forwarded = &self.metrics.forwarded;
        forwarded.set(forwarded.get() + 1);
    }

    /// Appends every item on its owner now, in order (locally, or queued to the owner's outbox,
    /// which keeps the order); returns the completion that waits for the acknowledgements.
    /// Items are (index, owner, item).
    pub async fn produce(
        self: &Rc<Self>,
        items: Vec<(usize, usize, AppendItem)>,
        acks: Acks,
        timeout_ms: u32,
    ) -> impl Future<Output = Indexed<Result<ProduceAck, Failure>>> + 'static {
        let mut waits: Vec<(Vec<usize>, OutcomesFuture)> = Vec::new();
        for (owner, (indexes, items)) in by_owner(items) {
            if owner == self.id {
                let local = self.partitions.append_all(items, acks, timeout_ms).await;
                waits.push((indexes, Box::pin(local)));
                continue;
            }
            self.count_forwarded();
            let (tx, rx) = oneshot::channel();
            let msg = PartitionMessage::Append {
                items,
                acks,
                timeout_ms,
                reply: tx,
            };
            self.mesh.send(owner, ShardMessage::Partition(msg)).await;
            let n = indexes.len();
            waits.push((
                indexes,
                Box::pin(async move { await_reply(rx).await.unwrap_or_else(|f| vec![Err(f); n]) }),
            ));
        }
        async move {
            let mut out = Vec::new();
            for (indexes, wait) in waits {
                let outcomes = wait.await;
                strict_assert_eq!(outcomes.len(), indexes.len(), "one outcome per item");
                out.extend(indexes.into_iter().zip(outcomes));
            }
            out
        }
    }

    /// A fetch: reads every target on its owner (concurrently across cores) and, while fewer
    /// than `min_bytes` are there and nothing failed or diverged, waits for new data up to
    /// `max_wait_ms`.
    /// One outcome per target (`None` where the target is `None`).
    pub async fn fetch(self: &Rc<Self>, plan: FetchPlan) -> Vec<Option<FetchOutcome>> {
        let deadline = Instant::now() + Duration::from_millis(plan.max_wait_ms);
        let refused = plan.targets.iter().any(Option::is_none);
        let items = || {
            plan.targets
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.as_ref().map(|(owner, item)| (i, *owner, item.clone())))
        };
        let mut outcomes: Vec<Option<FetchOutcome>> =
            (0..plan.targets.len()).map(|_| None).collect();
        loop {
            for (i, o) in self.read_everywhere(items(), plan.copy).await {
                outcomes[i] = Some(o);
            }
            let outcomes_now = outcomes.iter().flatten();
            let total: u64 = outcomes_now.clone().map(|o| o.size_bytes).sum();
            // An error or a diverging epoch is answered at once (Kafka's DelayedFetch does
            // too): the follower must truncate before anything else, and the answer does not
            // change by waiting (a diverged follower held for the whole fetch wait kept a
            // new leader's high watermark, and its acks=all producers, waiting 500 ms).
            let answer_now = refused
                || outcomes_now
                    .clone()
                    .any(|o| o.failure.is_some() || o.diverging_epoch.is_some());
            if plan.min_bytes == 0
                || total >= plan.min_bytes
                || answer_now
                || Instant::now() >= deadline
            {
                return outcomes;
            }
            let waits = items().map(|(_, owner, item)| {
                let to_log_end = item.replica.is_some();
                (owner, item.partition, item.fetch_offset, to_log_end)
            });
            self.wait_everywhere(waits, deadline).await;
            if Instant::now() >= deadline {
                for (i, o) in self.read_everywhere(items(), plan.copy).await {
                    outcomes[i] = Some(o);
                }
                return outcomes;
            }
        }
    }

    /// Reads every item on its owner (concurrently across cores). Items are (index, owner,
    /// item).
    async fn read_everywhere(
        self: &Rc<Self>,
        items: impl IntoIterator<Item = (usize, usize, FetchItem)>,
        copy: bool,
    ) -> Indexed<FetchOutcome> {
        let mut pending = Vec::new();
        for (owner, (indexes, items)) in by_owner(items) {
            let n = items.len();
            let t = if owner == self.id {
                let partitions = self.partitions.clone();
                task::spawn(async move { partitions.read_all(&items, copy).await })
            } else {
                self.count_forwarded();
                let shard = self.clone();
                task::spawn(async move {
                    let asked = shard.mesh.ask(owner, |reply| {
                        ShardMessage::Partition(PartitionMessage::Read { items, copy, reply })
                    });
                    match asked.await {
                        Ok(v) => v,
                        Err(f) => (0..n).map(|_| FetchOutcome::failed(f.clone())).collect(),
                    }
                })
            };
            pending.push((indexes, t));
        }
        let mut out = Vec::new();
        for (indexes, t) in pending {
            let outcomes = t.await;
            strict_assert_eq!(outcomes.len(), indexes.len(), "one outcome per item");
            out.extend(indexes.into_iter().zip(outcomes));
        }
        out
    }

    /// Waits until any of the partitions has data past its offset, or the deadline. Items are
    /// (owner, partition, offset, whether to the log end: replica fetches).
    async fn wait_everywhere(
        self: &Rc<Self>,
        items: impl IntoIterator<Item = (usize, PartitionRef, i64, bool)>,
        deadline: Instant,
    ) {
        let mut waits: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
        let indexed = items
            .into_iter()
            .map(|(owner, p, o, e)| (0, owner, (p, o, e)));
        for (owner, (_, items)) in by_owner(indexed) {
            if owner == self.id {
                let partitions = self.partitions.clone();
                waits.push(Box::pin(async move {
                    partitions.wait_for_data(&items, deadline).await
                }));
                continue;
            }
            let (tx, rx) = oneshot::channel();
            let msg = PartitionMessage::WaitForData {
                items,
                deadline,
                reply: tx,
            };
            self.mesh.send(owner, ShardMessage::Partition(msg)).await;
            waits.push(Box::pin(async move {
                let _ = await_reply(rx).await;
            }));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        time::timeout(remaining, first_of(waits)).await;
    }

    /// Where leader epochs end, on each item's owner. Items are (index, owner, item).
    pub async fn epoch_ends(
        self: &Rc<Self>,
        items: Vec<(usize, usize, EpochEndItem)>,
    ) -> Indexed<Result<EpochEnd, Failure>> {
        let mut out = Vec::new();
        for (owner, (indexes, items)) in by_owner(items) {
            let n = items.len();
            let outcomes = if owner == self.id {
                self.partitions.epoch_ends(&items)
            } else {
                let asked = self.mesh.ask(owner, |reply| {
                    ShardMessage::Partition(PartitionMessage::EpochEnds { items, reply })
                });
                asked.await.unwrap_or_else(|f| vec![Err(f); n])
            };
            strict_assert_eq!(outcomes.len(), indexes.len(), "one outcome per item");
            out.extend(indexes.into_iter().zip(outcomes));
        }
        out
    }

    /// Offsets by time on each item's owner. Items are (index, owner, item).
    pub async fn list_offsets(
        self: &Rc<Self>,
        items: Vec<(usize, usize, ListOffsetsItem)>,
    ) -> Indexed<Result<OffsetLookup, Failure>> {
        let mut out = Vec::new();
        for (owner, (indexes, items)) in by_owner(items) {
            let n = items.len();
            let outcomes = if owner == self.id {
                self.partitions.list_offsets(&items).await
            } else {
                let asked = self.mesh.ask(owner, |reply| {
                    ShardMessage::Partition(PartitionMessage::ListOffsets { items, reply })
                });
                asked.await.unwrap_or_else(|f| vec![Err(f); n])
            };
            strict_assert_eq!(outcomes.len(), indexes.len(), "one outcome per item");
            out.extend(indexes.into_iter().zip(outcomes));
        }
        out
    }

    /// Sends a request to the group's coordinator core (or runs it here).
    pub async fn group(
        self: &Rc<Self>,
        group: &str,
        request: GroupRequest,
    ) -> Result<GroupResponse, Failure> {
        check_group_id(group)?;
        let (owner, _) = coordinator::coordinator_core(&self.image(), group)?;
        if owner == self.id {
            return Ok(self.groups.execute(request).await);
        }
        self.count_forwarded();
        self.mesh
            .ask(owner, |reply| {
                ShardMessage::Group(GroupMessage { request, reply })
            })
            .await
    }

    /// Runs a group request on every core's coordinator, in core order.
    pub async fn group_everywhere(
        self: &Rc<Self>,
        request: GroupRequest,
    ) -> Result<Vec<GroupResponse>, Failure> {
        let mut out = Vec::with_capacity(self.cores());
        for to in 0..self.cores() {
            let request = request.clone();
            out.push(if to == self.id {
                self.groups.execute(request).await
            } else {
                self.mesh
                    .ask(to, |reply| {
                        ShardMessage::Group(GroupMessage { request, reply })
                    })
                    .await?
            });
        }
        Ok(out)
    }

    /// Sends a controller request to core 0 (or runs it here) and waits for its results.
    pub async fn controller<T>(
        self: &Rc<Self>,
        make: impl FnOnce(oneshot::Sender<Results<T>>) -> ControllerRequest,
    ) -> Result<Results<T>, Failure> {
        let (tx, rx) = oneshot::channel();
        let request = make(tx);
        if self.id == 0 {
            self.run_controller(request).await;
        } else {
            self.mesh.send(0, ShardMessage::Controller(request)).await;
        }
        await_reply(rx).await
    }

    /// Metrics snapshots of every core that answers, in core order.
    pub async fn gather_metrics(self: &Rc<Self>) -> Vec<MetricsSnapshot> {
        let mut snapshots = Vec::with_capacity(self.cores());
        for to in 0..self.cores() {
            if to == self.id {
                snapshots.push(self.snapshot());
                continue;
            }
            let asked = self.mesh.ask(to, |reply| {
                ShardMessage::Lifecycle(LifecycleMessage::Metrics { reply })
            });
            if let Ok(s) = asked.await {
                snapshots.push(s);
            }
        }
        snapshots
    }
}
