//! Bounded channels between cores: a full mesh where core `i` sends to core `j` over its own
//! single-producer single-consumer queue. Create the mesh on one thread before the executors
//! start ([`mesh`]), move each core's [`MeshEndpoints`] into its executor, then
//! [`MeshEndpoints::connect`] there.

use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};

/// One core's unconnected ends of the mesh. `Send`: moved into the core's executor.
pub struct MeshEndpoints<T: Send + 'static> {
    core: usize,
    senders: Vec<Option<SharedSender<T>>>,
    receivers: Vec<Option<SharedReceiver<T>>>,
}

/// Builds a full mesh of bounded channels for `cores` cores, each channel holding at most
/// `capacity` messages. Index `i` of the result belongs to core `i`.
pub fn mesh<T: Send + 'static>(cores: usize, capacity: usize) -> Vec<MeshEndpoints<T>> {
    let mut ends: Vec<MeshEndpoints<T>> = (0..cores)
        .map(|core| MeshEndpoints {
            core,
            senders: (0..cores).map(|_| None).collect(),
            receivers: (0..cores).map(|_| None).collect(),
        })
        .collect();
    for from in 0..cores {
        for to in 0..cores {
            if from == to {
                continue;
            }
            let (tx, rx) = shared_channel::new_bounded(capacity.max(1));
            ends[from].senders[to] = Some(tx);
            ends[to].receivers[from] = Some(rx);
        }
    }
    ends
}

/// The receiving core has stopped (or the target was the sending core itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("core {to} is not reachable")]
pub struct ChannelClosed {
    /// The target core.
    pub to: usize,
}

/// A core's connected senders, one per other core. Lives on one core.
pub struct CoreSenders<T: Send + 'static> {
    core: usize,
    senders: Vec<Option<ConnectedSender<T>>>,
}

impl<T: Send + 'static> CoreSenders<T> {
    /// This core's index.
    pub fn core(&self) -> usize {
        self.core
    }

    /// Number of cores in the mesh.
    pub fn cores(&self) -> usize {
        self.senders.len()
    }

    /// Sends to core `to`, waiting while its queue is full (backpressure). Fails (dropping the
    /// message) if that core has stopped or `to` is this core.
    pub async fn send_to(&self, to: usize, msg: T) -> Result<(), ChannelClosed> {
        match self.senders.get(to).and_then(|s| s.as_ref()) {
            Some(s) => s.send(msg).await.map_err(|_| ChannelClosed { to }),
            None => Err(ChannelClosed { to }),
        }
    }

    /// Closes every sender (receivers then see the end of their stream).
    pub fn close(&self) {
        for s in self.senders.iter().flatten() {
            s.close();
        }
    }
}

/// The receiving end from one other core. Lives on one core.
pub struct CoreReceiver<T: Send + 'static> {
    /// The sending core.
    pub from: usize,
    inner: ConnectedReceiver<T>,
}

impl<T: Send + 'static> CoreReceiver<T> {
    /// Next message; `None` once the sender closed.
    pub async fn recv(&self) -> Option<T> {
        self.inner.recv().await
    }
}

impl<T: Send + 'static> MeshEndpoints<T> {
    /// Connects every end (every core must do this concurrently; each connect waits for its peer).
    ///
    /// glommio wakes a connecting channel end only when its own reactor loops, not when the
    /// peer connects, so an executor parked here could sleep for seconds (measured: 10-16 s
    /// under load). A 1 ms ticker keeps the reactor looping until every end is connected.
    pub async fn connect(self) -> (CoreSenders<T>, Vec<CoreReceiver<T>>) {
        futures_lite::future::or(self.connect_all(), async {
            loop {
                crate::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await
    }

    /// Like [`MeshEndpoints::connect`], but gives up (`None`) once `abort` returns true, for
    /// example because another core failed to start and will never connect its ends.
    pub async fn connect_or_abort(
        self,
        abort: impl Fn() -> bool,
    ) -> Option<(CoreSenders<T>, Vec<CoreReceiver<T>>)> {
        futures_lite::future::or(async { Some(self.connect_all().await) }, async {
            loop {
                crate::time::sleep(std::time::Duration::from_millis(1)).await;
                if abort() {
                    return None;
                }
            }
        })
        .await
    }

    async fn connect_all(self) -> (CoreSenders<T>, Vec<CoreReceiver<T>>) {
        let core = self.core;
        let send_tasks: Vec<_> = self
            .senders
            .into_iter()
            .map(|s| s.map(|s| glommio::spawn_local(s.connect())))
            .collect();
        let recv_tasks: Vec<_> = self
            .receivers
            .into_iter()
            .enumerate()
            .map(|(from, r)| r.map(|r| (from, glommio::spawn_local(r.connect()))))
            .collect();
        let mut senders = Vec::with_capacity(send_tasks.len());
        for t in send_tasks {
            senders.push(match t {
                Some(t) => Some(t.await),
                None => None,
            });
        }
        let mut receivers = Vec::new();
        for (from, t) in recv_tasks.into_iter().flatten() {
            receivers.push(CoreReceiver {
                from,
                inner: t.await,
            });
        }
        (CoreSenders { core, senders }, receivers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cross_cores_in_order() {
        let cores = 2;
        let mut ends = mesh::<u64>(cores, 4);
        let end1 = ends.pop().unwrap();
        let end0 = ends.pop().unwrap();
        let t1 = std::thread::spawn(move || {
            crate::executor::run_local(async move {
                let (_tx, rx) = end1.connect().await;
                let mut got = Vec::new();
                while let Some(v) = rx[0].recv().await {
                    got.push(v);
                }
                got
            })
            .unwrap()
        });
        crate::executor::run_local(async move {
            let (tx, _rx) = end0.connect().await;
            for i in 0..100 {
                tx.send_to(1, i).await.unwrap();
            }
            assert!(tx.send_to(0, 5).await.is_err());
            tx.close();
        })
        .unwrap();
        assert_eq!(t1.join().unwrap(), (0..100).collect::<Vec<_>>());
    }
}
