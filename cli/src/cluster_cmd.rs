//! `borges storage` (format a data directory for a cluster, print a new cluster id) and
//! `borges cluster describe` (the controller quorum and the brokers, as
//! `kafka-metadata-quorum.sh describe --status` / `--replication` print them).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use borges_replication::cluster::ClusterMetadata;
use borges_replication::link::{LinkClient, QuorumStatus};
use borges_replication::metadata::MetadataImage;
use borges_replication::types::StateMachine;
use clap::Subcommand;

/// `borges storage ...`
#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Prepare a data directory for a cluster member (writes meta.properties).
    #[command(
        after_help = concat!(
            "Examples:\n  ID=$(borges storage random-cluster-id)\n",
            "  borges storage format --data-dir n1 --cluster-id $ID --node-id 1\n\n",
            "Every member of a cluster is formatted with the same cluster id and its own node id."
        )
    )]
    Format {
        /// The broker's data directory.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// The cluster id (`borges storage random-cluster-id` prints one).
        #[arg(long, value_name = "ID")]
        cluster_id: String,
        /// The node id of the broker that will use this directory.
        #[arg(long, value_name = "N")]
        node_id: u64,
        /// Succeed on a directory formatted already for the same cluster and node.
        #[arg(long)]
        ignore_formatted: bool,
    },
    /// Print a new random cluster id.
    #[command(after_help = "Examples:\n  borges storage random-cluster-id")]
    RandomClusterId,
}

/// `borges cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Describe the controller quorum and every registered broker.
    #[command(
        after_help = concat!(
            "Examples:\n  borges cluster describe --bootstrap-controller 127.0.0.1:9393\n",
            "  borges cluster describe --bootstrap-controller 127.0.0.1:9393,127.0.0.1:9493 \\\n",
            "    --replication"
        )
    )]
    Describe {
        /// Controller-link addresses to try (host:port[,host:port...]).
        #[arg(long, env = "BORGES_BOOTSTRAP_CONTROLLER", value_name = "HOST:PORT")]
        bootstrap_controller: String,
        /// Each voter's and observer's log end and lag instead of the status.
        #[arg(long)]
        replication: bool,
    },
}

/// Runs `borges storage ...`.
pub fn run_storage(command: StorageCommand) -> anyhow::Result<()> {
    use borges_replication::format;
    match command {
        StorageCommand::Format {
            data_dir,
            cluster_id,
            node_id,
            ignore_formatted,
        } => {
            let props = format::format(&data_dir, &cluster_id, node_id, ignore_formatted)?;
            println!(
                "Formatted {} for node {} of cluster {} (directory id {})",
                data_dir.display(),
                props.node_id,
                props.cluster_id,
                props.directory_id
            );
        }
        StorageCommand::RandomClusterId => println!("{}", format::random_id()),
    }
    Ok(())
}

/// Runs `borges cluster ...`.
pub fn run_cluster(command: ClusterCommand, tls: Option<TlsClient>) -> anyhow::Result<()> {
    let ClusterCommand::Describe {
        bootstrap_controller,
        replication,
    } = command;
    let (status, image) = describe(&bootstrap_controller, tls.as_ref())?;
    let lines = if replication {
        replication_lines(&status)
    } else {
        let mut lines = status_lines(&status);
        lines.extend(broker_lines(&image));
        lines
    };
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

const LINK_TIMEOUT: Duration = Duration::from_secs(5);

/// The rustls configuration of the global `--tls-*` flags (the controller link of a TLS
/// cluster speaks TLS too).
pub type TlsClient = std::sync::Arc<rustls::ClientConfig>;

/// The leader's view of the quorum (a follower's when no leader answers) and its image.
fn describe(
    bootstrap: &str,
    tls: Option<&TlsClient>,
) -> anyhow::Result<(QuorumStatus, MetadataImage)> {
    let mut errors = Vec::new();
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match describe_at(addr, tls) {
            Ok(found) => return Ok(found),
            Err(e) => errors.push(format!("{addr}: {e:#}")),
        }
    }
    if errors.is_empty() {
        bail!("--bootstrap-controller is empty: give at least one host:port");
    }
    Err(anyhow!("no controller answered ({})", errors.join("; ")))
}

fn describe_at(
    addr: &str,
    tls: Option<&TlsClient>,
) -> anyhow::Result<(QuorumStatus, MetadataImage)> {
    // A tool that does not know the cluster id connects read-only.
    let mut client = LinkClient::connect_tls(addr, "", LINK_TIMEOUT, tls.cloned())?;
    let mut status = client.describe()?;
    if let Some(leader_addr) = status
        .leader_id
        .filter(|&l| l != status.node_id)
        .and_then(|l| status.addresses.get(&l).cloned())
    {
        if let Ok(mut leader) =
            LinkClient::connect_tls(&leader_addr, "", LINK_TIMEOUT, tls.cloned())
        {
            if let Ok(s) = leader.describe() {
                status = s;
                client = leader;
            }
        }
    }
    let state = client.read_state()?;
    let state = ClusterMetadata::decode(&state.state)
        .map_err(|e| anyhow!(e))
        .context("decoding the metadata image")?;
    Ok((status, (*state.image).clone()))
}

fn ids(v: &[u64]) -> String {
    let parts: Vec<String> = v.iter().map(u64::to_string).collect();
    format!("[{}]", parts.join(","))
}

/// Lag of each member behind the leader's log end (on the leader only).
fn lags(s: &QuorumStatus) -> BTreeMap<u64, u64> {
    let end = s.last_log_index.unwrap_or(0);
    s.matched
        .as_ref()
        .map(|m| {
            m.iter()
                .map(|(id, i)| (*id, end.saturating_sub(i.unwrap_or(0))))
                .collect()
        })
        .unwrap_or_default()
}

/// `describe --status`, Kafka's first block.
pub fn status_lines(s: &QuorumStatus) -> Vec<String> {
    let lags = lags(s);
    let max_lag = s
        .voters
        .iter()
        .filter_map(|v| lags.get(v))
        .max()
        .copied()
        .unwrap_or(0);
    vec![
        format!("ClusterId:              {}", s.cluster_id),
        format!(
            "LeaderId:               {}",
            s.leader_id.map_or("-1".into(), |l| l.to_string())
        ),
        format!("LeaderEpoch:            {}", s.term),
        format!("HighWatermark:          {}", s.last_applied.unwrap_or(0)),
        format!("MaxFollowerLag:         {max_lag}"),
        format!(
            "MaxFollowerLagTimeMs:   {}",
            s.millis_since_quorum_ack.unwrap_or(0)
        ),
        format!("CurrentVoters:          {}", ids(&s.voters)),
        format!("CurrentObservers:       {}", ids(&s.learners)),
    ]
}

/// One line per registered broker: id, endpoints, state.
pub fn broker_lines(image: &MetadataImage) -> Vec<String> {
    image
        .brokers
        .values()
        .map(|b| {
            let r = &b.registration;
            let cores: Vec<String> = r
                .cores
                .iter()
                .map(|c| format!("{}={}:{}", c.core, r.host, c.port))
                .collect();
            format!(
                "BrokerId: {}\tEndpoints: {}:{}\tCores: {}\tController: {}\tEpoch: {}\tState: {}",
                r.id,
                r.host,
                r.port,
                cores.join(","),
                r.controller_addr,
                b.epoch,
                b.state.as_str()
            )
        })
        .collect()
}

/// `describe --replication`: each member's log end and lag as the leader sees them.
pub fn replication_lines(s: &QuorumStatus) -> Vec<String> {
    let lags = lags(s);
    let end = s.last_log_index.unwrap_or(0);
    let mut lines = vec!["NodeId\tLogEndOffset\tLag\tStatus".to_string()];
    let members = s
        .voters
        .iter()
        .map(|v| (*v, true))
        .chain(s.learners.iter().map(|l| (*l, false)));
    for (id, voter) in members {
        let status = if Some(id) == s.leader_id {
            "Leader"
        } else if voter {
            "Follower"
        } else {
            "Observer"
        };
        let lag = lags.get(&id).copied();
        let log_end = lag.map_or("-1".to_string(), |l| (end - l + 1).to_string());
        let lag = lag.map_or("-1".to_string(), |l| l.to_string());
        lines.push(format!("{id}\t{log_end}\t{lag}\t{status}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> QuorumStatus {
        QuorumStatus {
            cluster_id: "abc".into(),
            node_id: 2,
            state: "Leader".into(),
            leader_id: Some(2),
            term: 3,
            last_log_index: Some(40),
            last_applied: Some(40),
            snapshot_index: None,
            purged_index: None,
            voters: vec![1, 2, 3],
            learners: vec![4],
            addresses: BTreeMap::new(),
            matched: Some([(1, Some(38)), (2, Some(40)), (3, Some(40)), (4, None)].into()),
            millis_since_quorum_ack: Some(7),
        }
    }

    #[test]
    fn status_prints_kafka_metadata_quorum_fields() {
        let lines = status_lines(&status());
        assert_eq!(lines[0], "ClusterId:              abc");
        assert_eq!(lines[1], "LeaderId:               2");
        assert_eq!(lines[2], "LeaderEpoch:            3");
        assert_eq!(lines[4], "MaxFollowerLag:         2");
        assert_eq!(lines[6], "CurrentVoters:          [1,2,3]");
        assert_eq!(lines[7], "CurrentObservers:       [4]");
    }

    #[test]
    fn replication_prints_log_ends_and_lags() {
        let lines = replication_lines(&status());
        assert_eq!(lines[1], "1\t39\t2\tFollower");
        assert_eq!(lines[2], "2\t41\t0\tLeader");
        assert_eq!(lines[4], "4\t1\t40\tObserver");
    }
}
