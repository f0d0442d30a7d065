//! The `[cluster]` section of the broker configuration: controller quorum, broker sessions,
//! replication defaults. Without `controller_voters` the broker is the single-node default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Cluster settings (TOML `[cluster]`; flags `--controller-listen`, `--controller-voters`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Controller-link listener (Raft, registration, heartbeats); every cluster member has one.
    pub controller_listen: Option<String>,
    /// The controller quorum, `id@host:port` each (Kafka's `controller.quorum.voters`). A
    /// member whose node id is listed votes (combined mode); any other member follows the
    /// metadata log without voting (broker-only).
    pub controller_voters: Vec<String>,
    /// How often a broker heartbeats to the active controller
    /// (`broker.heartbeat.interval.ms`).
    pub heartbeat_interval_ms: u64,
    /// A broker not heard from for this long is fenced and its partitions get new leaders
    /// (`broker.session.timeout.ms`).
    pub session_timeout_ms: u64,
    /// How long a metadata change waits for an active controller before it fails.
    pub controller_request_timeout_ms: u64,
    /// How long a SIGTERM waits for the controller to move this broker's leadership away.
    pub controlled_shutdown_timeout_ms: u64,
    /// Raft leader heartbeat.
    pub raft_heartbeat_interval_ms: u64,
    /// Raft election timeout of the first voter (later voters wait `raft_election_stagger_ms`
    /// more each).
    pub raft_election_timeout_ms: u64,
    /// How much later each next voter's election window starts.
    pub raft_election_stagger_ms: u64,
    /// Replication factor of topics created with -1 (`default.replication.factor`).
    pub default_replication_factor: i16,
    /// Replication factor of `__consumer_offsets`, capped by the voter count
    /// (`offsets.topic.replication.factor`).
    pub offsets_topic_replication_factor: i16,
    /// A follower not caught up for this long leaves the ISR (`replica.lag.time.max.ms`).
    pub replica_lag_time_max_ms: u64,
    /// How long a follower's fetch waits for new data on the leader
    /// (`replica.fetch.wait.max.ms`).
    pub replica_fetch_wait_max_ms: u64,
    /// Bytes a follower's fetch asks for per partition (`replica.fetch.max.bytes`).
    pub replica_fetch_bytes_max: u32,
    /// A follower's pause after an error or an unknown leader epoch
    /// (`replica.fetch.backoff.ms`).
    pub replica_fetch_backoff_ms: u64,
    /// The active controller gives partitions their preferred (first) replica back as leader
    /// once it runs and is in the ISR again (`auto.leader.rebalance.enable`).
    pub auto_leader_rebalance_enable: bool,
    /// How often the active controller looks for partitions not led by their preferred
    /// replica (`leader.imbalance.check.interval.seconds`, in ms).
    pub leader_imbalance_check_interval_ms: u64,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            controller_listen: None,
            controller_voters: Vec::new(),
            heartbeat_interval_ms: 100,
            session_timeout_ms: 750,
            controller_request_timeout_ms: 10_000,
            controlled_shutdown_timeout_ms: 5_000,
            raft_heartbeat_interval_ms: 50,
            raft_election_timeout_ms: 150,
            raft_election_stagger_ms: 100,
            default_replication_factor: 1,
            offsets_topic_replication_factor: 3,
            replica_lag_time_max_ms: 10_000,
            replica_fetch_wait_max_ms: 500,
            replica_fetch_bytes_max: 1024 * 1024,
            replica_fetch_backoff_ms: 100,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 300_000,
        }
    }
}

impl ClusterSettings {
    /// Whether this broker is a cluster member (else the single-node default).
    pub fn enabled(&self) -> bool {
        !self.controller_voters.is_empty()
    }

    /// The voters by node id.
    pub fn voters(&self) -> Result<BTreeMap<u64, String>, String> {
        let mut out = BTreeMap::new();
        for v in &self.controller_voters {
            let (id, addr) = v
                .split_once('@')
                .ok_or_else(|| format!("controller voter {v:?} is not id@host:port"))?;
            let id: u64 = id
                .trim()
                .parse()
                .map_err(|_| format!("controller voter {v:?}: {id:?} is not a node id"))?;
            let addr = addr.trim();
            if addr
                .rsplit_once(':')
                .is_none_or(|(_, p)| p.parse::<u16>().is_err())
            {
                return Err(format!("controller voter {v:?}: {addr:?} is not host:port"));
            }
            if out.insert(id, addr.to_string()).is_some() {
                return Err(format!("controller voter id {id} appears twice"));
            }
        }
        Ok(out)
    }

    /// Checks the settings of a cluster member with node id `node_id`.
    pub fn validate(&self, node_id: i32) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        let voters = self.voters()?;
        if node_id < 0 {
            return Err(format!("node id {node_id} must be 0 or more"));
        }
        let Some(listen) = &self.controller_listen else {
            return Err("a cluster member needs --controller-listen HOST:PORT".into());
        };
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!("controller_listen {listen:?} is not an IP:port"));
        }
        if let Some(addr) = voters.get(&(node_id as u64)) {
            let port = |a: &str| a.rsplit_once(':').map(|(_, p)| p.to_string());
            if port(addr) != port(listen) {
                return Err(format!(
                    "node {node_id} is voter {addr} in controller_voters but listens on \
                     {listen}: the ports must agree"
                ));
            }
        }
        if self.heartbeat_interval_ms == 0 || self.session_timeout_ms <= self.heartbeat_interval_ms
        {
            return Err(format!(
                "session_timeout_ms {} must exceed heartbeat_interval_ms {} (> 0)",
                self.session_timeout_ms, self.heartbeat_interval_ms
            ));
        }
        if self.default_replication_factor < 1 || self.offsets_topic_replication_factor < 1 {
            return Err("replication factors must be at least 1".into());
        }
        if self.replica_lag_time_max_ms < 2 * self.replica_fetch_wait_max_ms.max(1) {
            return Err(format!(
                "replica_lag_time_max_ms {} must be at least twice replica_fetch_wait_max_ms {}",
                self.replica_lag_time_max_ms, self.replica_fetch_wait_max_ms
            ));
        }
        if self.replica_fetch_bytes_max == 0 {
            return Err("replica_fetch_bytes_max must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(voters: &[&str], listen: &str) -> ClusterSettings {
        ClusterSettings {
            controller_listen: Some(listen.into()),
            controller_voters: voters.iter().map(|s| s.to_string()).collect(),
            ..ClusterSettings::default()
        }
    }

    #[test]
    fn voters_parse_and_bad_ones_are_refused() {
        let c = member(&["1@127.0.0.1:9393", "2@localhost:9394"], "127.0.0.1:9393");
        assert_eq!(c.voters().unwrap().len(), 2);
        assert!(c.validate(1).is_ok());
        assert!(c.validate(7).is_ok(), "a broker-only member");
        assert!(member(&["x@h:1"], "127.0.0.1:1").validate(1).is_err());
        assert!(member(&["1@h"], "127.0.0.1:1").validate(1).is_err());
        assert!(member(&["1@h:1", "1@h:2"], "127.0.0.1:1")
            .validate(1)
            .is_err());
        let err = member(&["1@127.0.0.1:9393"], "127.0.0.1:9999").validate(1);
        assert!(err.unwrap_err().contains("ports must agree"));
        let mut no_listen = member(&["1@127.0.0.1:9393"], "x");
        no_listen.controller_listen = None;
        assert!(no_listen
            .validate(1)
            .unwrap_err()
            .contains("--controller-listen"));
        assert!(ClusterSettings::default().validate(0).is_ok());
    }
}
