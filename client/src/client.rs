//! The state every component shares: configuration, the connection pool and the metadata
//! cache. `Send + Sync`, used behind an `Arc` by the producer, the consumer and the admin
//! client (each builds its own, so their connections are independent).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use borges_protocol::ApiKey;

use crate::codec;
use crate::config::ClientConfig;
use crate::connection::{Connection, Request, Response};
use crate::error::{ClientError, Result};
use crate::metadata::ClusterMetadata;

/// The connection to one address, once connected.
type ConnectionSlot = tokio::sync::Mutex<Option<Arc<Connection>>>;

/// Shared client state. The metadata snapshot is an `Arc` swapped under a short lock;
/// connections are opened lazily, one per `host:port`, and replaced when they die.
pub(crate) struct ClientCore {
    pub config: ClientConfig,
    /// The rustls configuration built from `config.tls`.
    tls: Option<Arc<rustls::ClientConfig>>,
    in_flight_requests_max: usize,
    /// One slot per address; a slot's async mutex serializes connecting to that address only,
    /// so a slow connect never holds up requests to other cores.
    pool: std::sync::Mutex<HashMap<String, Arc<ConnectionSlot>>>,
    metadata: RwLock<Arc<ClusterMetadata>>,
    refresh: tokio::sync::Mutex<()>,
    refresh_generation: AtomicU64,
    /// Addresses whose last cluster-wide request failed (no connection, connection lost, no
    /// answer in time), with when: [`ClientCore::call_any`] tries them last, oldest failure
    /// first, until one answers again. A paused or cut-off broker must not hold up every
    /// metadata refresh while the others have moved its partitions on.
    suspects: std::sync::Mutex<HashMap<String, Instant>>,
}

impl ClientCore {
    /// A client with `in_flight_requests_max` pipelined requests per connection.
    pub fn new(config: ClientConfig, in_flight_requests_max: usize) -> Result<Arc<ClientCore>> {
        config.validate()?;
        let tls = match &config.tls {
            Some(tls) => Some(crate::tls::client_config(tls)?),
            None => None,
        };
        Ok(Arc::new(ClientCore {
            config,
            tls,
            in_flight_requests_max,
            pool: std::sync::Mutex::new(HashMap::new()),
            metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
            refresh: tokio::sync::Mutex::new(()),
            refresh_generation: AtomicU64::new(0),
            suspects: std::sync::Mutex::new(HashMap::new()),
        }))
    }

    /// The current metadata snapshot.
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        match self.metadata.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Increases with every metadata refresh; lets callers cache what they derived from it.
    pub fn metadata_generation(&self) -> u64 {
        self.refresh_generation.load(Ordering::Acquire)
    }

    fn set_metadata(&self, metadata: ClusterMetadata) -> Arc<ClusterMetadata> {
        let metadata = Arc::new(metadata);
        match self.metadata.write() {
            Ok(mut guard) => *guard = metadata.clone(),
            Err(poisoned) => *poisoned.into_inner() = metadata.clone(),
        }
        metadata
    }

    /// The pooled connection to `addr`, connecting when there is none or it died.
    pub async fn connection(&self, addr: &str) -> Result<Arc<Connection>> {
        let slot = {
            let mut pool = match self.pool.lock() {
                Ok(pool) => pool,
                Err(poisoned) => poisoned.into_inner(),
            };
            pool.entry(addr.to_string()).or_default().clone()
        };
        let mut current = slot.lock().await;
        if let Some(conn) = current.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let conn = Arc::new(
            Connection::connect(
                addr,
                self.config.connect_timeout_ms,
                self.in_flight_requests_max,
                self.config.frame_size_bytes_max,
                self.tls.as_ref(),
            )
            .await?,
        );
        if let Some(sasl) = &self.config.sasl {
            let timeout_ms = self.config.request_timeout_ms;
            crate::sasl::authenticate(&conn, addr, sasl, timeout_ms).await?;
        }
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// Addresses to try for cluster-wide requests: known brokers first, then bootstrap; the
    /// suspects (their last request failed) after all others, the longest-failed first.
    fn candidate_addrs(&self) -> Vec<String> {
        let mut addrs = self.metadata().broker_addrs();
        for b in &self.config.bootstrap {
            if !addrs.contains(b) {
                addrs.push(b.clone());
            }
        }
        let suspects = self.suspects();
        // Stable: unsuspected addresses keep their order.
        addrs.sort_by_key(|a| suspects.get(a).copied());
        addrs
    }

    fn suspects(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        match self.suspects.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn suspect(&self, addr: &str) {
        self.suspects().insert(addr.to_string(), Instant::now());
    }

    /// A request to `addr` (a broker's main listener or one of its cores) got no answer in
    /// time: its broker is tried last for cluster-wide requests. A broker cut off from the
    /// others still answers metadata, from before its partitions moved; asking it first after
    /// its produce or fetch timed out would route the retry straight back to it.
    pub fn suspect_unresponsive(&self, addr: &str) {
        let broker = self.metadata().broker_of(addr).map(str::to_string);
        self.suspect(broker.as_deref().unwrap_or(addr));
    }

    /// The brokers (main addresses) whose last request failed or timed out at or after
    /// `since`, and when. Suspicions stay until the broker answers a cluster-wide request, so
    /// the producer's sender asks only for those newer than its metadata: usually none, and
    /// then nothing is copied.
    pub fn suspects_since(&self, since: Instant) -> HashMap<String, Instant> {
        self.suspects()
            .iter()
            .filter(|(_, at)| **at >= since)
            .map(|(addr, at)| (addr.clone(), *at))
            .collect()
    }

    fn clear_suspect(&self, addr: &str) {
        let mut suspects = self.suspects();
        if !suspects.is_empty() {
            suspects.remove(addr);
        }
    }

    /// Sends `request` to any reachable broker (known brokers, then bootstrap; suspects
    /// last), returning the first response. Transport failures move on to the next address;
    /// so does a timeout for requests that change nothing ([`answers_anywhere`]), which any
    /// other broker can answer as well (a request that creates or deletes must not run twice).
    pub async fn call_any(&self, api_key: ApiKey, message: Vec<u8>) -> Result<Response> {
        let addrs = self.candidate_addrs();
        let mut last = None;
        for addr in &addrs {
            let conn = match self.connection(addr).await {
                Ok(conn) => conn,
                Err(e) => {
                    self.suspect(addr);
                    last = Some(e);
                    continue;
                }
            };
            let request = Request::new(api_key, message.clone());
            match conn.call(request, self.config.request_timeout_ms).await {
                Err(e @ (ClientError::Io { .. } | ClientError::ConnectionClosed { .. })) => {
                    self.suspect(addr);
                    last = Some(e)
                }
                Err(e @ ClientError::Timeout { .. }) => {
                    self.suspect(addr);
                    if !answers_anywhere(api_key) {
                        return Err(e);
                    }
                    last = Some(e)
                }
                other => {
                    tracing::debug!(%addr, api = ?api_key, "cluster-wide request answered");
                    self.clear_suspect(addr);
                    return other;
                }
            }
        }
        Err(ClientError::NoBrokerAvailable {
            tried: addrs.join(","),
            last: Box::new(last.unwrap_or(ClientError::InvalidConfig("no bootstrap".into()))),
        })
    }

    /// Sends a request to `addr` (a specific broker core) and waits for its response.
    pub async fn call(&self, addr: &str, api_key: ApiKey, message: Vec<u8>) -> Result<Response> {
        let conn = self.connection(addr).await?;
        conn.call(
            Request::new(api_key, message),
            self.config.request_timeout_ms,
        )
        .await
    }

    /// Fetches metadata for `topics` (`None`: all) and merges it into the cache. Concurrent
    /// callers that asked while a refresh was running reuse its result.
    pub async fn refresh_metadata(
        &self,
        topics: Option<&[String]>,
    ) -> Result<Arc<ClusterMetadata>> {
        let seen = self.refresh_generation.load(Ordering::Acquire);
        let _serialized = self.refresh.lock().await;
        if self.refresh_generation.load(Ordering::Acquire) != seen
            && topics.is_some_and(|t| self.covers(t))
        {
            return Ok(self.metadata());
        }
        let frame = self
            .call_any(ApiKey::Metadata, codec::metadata_request(topics))
            .await?;
        let response = codec::decode!(MetadataResponse, frame)?;
        let answered = ClusterMetadata::from_response(response)?;
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(leaders = %leaders_of(&answered), "metadata answered");
        }
        let fresh = self.metadata().keeping_newer_epochs(answered);
        let merged = if topics.is_none() {
            fresh
        } else {
            self.metadata().merged(fresh)
        };
        let metadata = self.set_metadata(merged);
        self.refresh_generation.fetch_add(1, Ordering::AcqRel);
        Ok(metadata)
    }

    fn covers(&self, topics: &[String]) -> bool {
        let metadata = self.metadata();
        topics.iter().all(|t| metadata.topics.contains_key(t))
    }

    /// Metadata that knows `topics`, refreshing when one is missing, has an error or has a
    /// leaderless partition, and waiting with backoff up to `max_block_ms` for them to appear.
    pub async fn metadata_for(
        &self,
        topics: &[String],
        max_block_ms: u64,
    ) -> Result<Arc<ClusterMetadata>> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(max_block_ms);
        let mut backoff_ms = 50;
        loop {
            let metadata = self.metadata();
            match usable(&metadata, topics) {
                Ok(()) => return Ok(metadata),
                Err(e) if !e.is_retriable() => return Err(e),
                Err(_) => {}
            }
            let metadata = self.refresh_metadata(Some(topics)).await;
            let error = match metadata {
                Ok(m) => match usable(&m, topics) {
                    Ok(()) => return Ok(m),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            if !error.is_retriable() || tokio::time::Instant::now() >= deadline {
                return Err(error);
            }
            tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
            backoff_ms = (backoff_ms * 2).min(1000);
        }
    }
}

/// Requests that read (or, for InitProducerId, hand out a fresh id), so that after a timeout
/// at one broker the same request may go to another.
fn answers_anywhere(api_key: ApiKey) -> bool {
    matches!(
        api_key,
        ApiKey::Metadata
            | ApiKey::DescribeConfigs
            | ApiKey::ListOffsets
            | ApiKey::FindCoordinator
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::InitProducerId
    )
}

/// Whether `metadata` describes every topic with a leader for each partition.
fn usable(metadata: &ClusterMetadata, topics: &[String]) -> Result<()> {
    for topic in topics {
        let Some(meta) = metadata.topics.get(topic) else {
            return Err(ClientError::Broker {
                code: borges_protocol::ErrorCode::UnknownTopicOrPartition,
                message: Some(format!("topic {topic} is not in the metadata")),
            });
        };
        if let Some(e) = &meta.error {
            return Err(e.clone());
        }
        if meta.partitions.is_empty() || meta.partitions.iter().any(|p| p.info.leader < 0) {
            return Err(ClientError::Broker {
                code: borges_protocol::ErrorCode::NotLeaderOrFollower,
                message: Some(format!("topic {topic} has partitions without a leader")),
            });
        }
    }
    Ok(())
}

/// `topic-partition:leader@epoch` of every partition in `metadata`, sorted (for debug logs).
fn leaders_of(metadata: &ClusterMetadata) -> String {
    let mut leaders: Vec<String> = metadata
        .topics
        .values()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                format!(
                    "{}-{}:{}@{}",
                    t.name, p.info.partition, p.info.leader, p.info.leader_epoch
                )
            })
        })
        .collect();
    leaders.sort();
    leaders.join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::ClientCore;
    use crate::config::ClientConfig;

    #[test]
    fn suspects_since_keeps_only_the_suspicions_at_or_after_the_instant() {
        let core = ClientCore::new(ClientConfig::new("127.0.0.1:9292"), 1).unwrap();
        let before = Instant::now();
        core.suspect("b1:9292");
        assert_eq!(core.suspects_since(before).len(), 1);
        let later = Instant::now() + Duration::from_millis(1);
        assert!(core.suspects_since(later).is_empty());
    }
}
