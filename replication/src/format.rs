//! `meta.properties`: the stamp `borges storage format` puts on a data directory (Kafka's
//! `kafka-storage.sh format`), and the checks a broker makes against it at start-up.
//!
//! A cluster member only starts on a directory formatted for its node id, so an empty or wiped
//! directory is never taken for a new member of an existing cluster (KIP-631). A single-node
//! broker stamps its directory itself on first start (`borges.single.node=true`); such a
//! directory is refused in cluster mode, since its data never belonged to a cluster.
//!
//! The file, as Kafka writes it (`key=value` lines, `#` comments):
//! ```text
//! cluster.id=<22-character URL-safe base64 id>
//! directory.id=<22-character URL-safe base64 id>
//! node.id=<N>
//! version=1
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::ReplicationError;

/// File name inside the data directory.
pub const META_PROPERTIES: &str = "meta.properties";
/// Longest cluster id accepted.
pub const CLUSTER_ID_CHARS_MAX: usize = 64;
/// The `version` this build writes and reads.
const VERSION: &str = "1";
/// Marks a directory the single-node broker stamped itself.
const SINGLE_NODE_KEY: &str = "borges.single.node";

/// What `meta.properties` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// The cluster the directory belongs to.
    pub cluster_id: String,
    /// The node the directory belongs to.
    pub node_id: u64,
    /// This directory's own id.
    pub directory_id: String,
    /// Stamped by a single-node broker on its first start, not by `borges storage format`.
    pub single_node: bool,
}

/// Why a directory cannot be used as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A cluster member's directory was never formatted.
    #[error(
        "data directory {dir} is not formatted: run `borges storage format --data-dir {dir} \
         --cluster-id ID --node-id {node_id}` first, with the same ID on every member \
         (`borges storage random-cluster-id` prints a new one)"
    )]
    NotFormatted {
        /// The directory.
        dir: PathBuf,
        /// The node that wanted it.
        node_id: u64,
    },
    /// Formatted for another node.
    #[error(
        "data directory {dir} is formatted for node {found} of cluster {cluster_id}, but this \
         broker is node {expected}: refusing to start (give each node its own directory)"
    )]
    OtherNode {
        /// The directory.
        dir: PathBuf,
        /// Its node id.
        found: u64,
        /// This broker's node id.
        expected: u64,
        /// Its cluster.
        cluster_id: String,
    },
    /// Formatted for another cluster.
    #[error(
        "data directory {dir} belongs to cluster {found}, not to cluster {expected}: refusing \
         to {action}"
    )]
    OtherCluster {
        /// The directory.
        dir: PathBuf,
        /// Its cluster id.
        found: String,
        /// The cluster asked for.
        expected: String,
        /// What was refused.
        action: &'static str,
    },
    /// A single-node directory used by a cluster member.
    #[error(
        "data directory {dir} belongs to a single-node broker (its data never belonged to a \
         cluster): refusing to start a cluster member on it; format a new directory with \
         `borges storage format`"
    )]
    SingleNode {
        /// The directory.
        dir: PathBuf,
    },
    /// `format` on a directory formatted already.
    #[error(
        "data directory {dir} is already formatted (cluster {cluster_id}, node {node_id}); \
         pass --ignore-formatted to accept that"
    )]
    AlreadyFormatted {
        /// The directory.
        dir: PathBuf,
        /// Its cluster id.
        cluster_id: String,
        /// Its node id.
        node_id: u64,
    },
    /// A cluster id with characters outside `[A-Za-z0-9_-]`, empty, or too long.
    #[error(
        "cluster id {0:?} is not valid: 1 to {CLUSTER_ID_CHARS_MAX} characters of A-Z, a-z, \
         0-9, '_' and '-' (`borges storage random-cluster-id` prints one)"
    )]
    BadClusterId(String),
    /// The file cannot be parsed.
    #[error("{path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

impl From<FormatError> for ReplicationError {
    fn from(e: FormatError) -> ReplicationError {
        ReplicationError::Config(e.to_string())
    }
}

/// A new random id, as Kafka prints cluster and directory ids: 16 random bytes in URL-safe
/// base64 without padding (22 characters). Never starts with `-` (Kafka's `Uuid.randomUuid`
/// draws again too): such an id would read as a flag on a command line
/// (`--cluster-id -y...` failed to parse).
pub fn random_id() -> String {
    loop {
        let mut bytes = [0u8; 16];
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&rand::random::<u64>().to_be_bytes());
        }
        let id = base64_url(&bytes);
        if !id.starts_with('-') {
            return id;
        }
    }
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Checks a cluster id's spelling.
pub fn check_cluster_id(id: &str) -> Result<(), FormatError> {
    let ok = !id.is_empty()
        && id.len() <= CLUSTER_ID_CHARS_MAX
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(FormatError::BadClusterId(id.to_string()))
    }
}

/// Reads `<dir>/meta.properties`; `None` when the directory has none.
pub fn read(dir: &Path) -> Result<Option<MetaProperties>, FormatError> {
    let path = dir.join(META_PROPERTIES);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FormatError::Io { path, source }),
    };
    let unreadable = |reason: String| FormatError::Unreadable {
        path: path.clone(),
        reason,
    };
    let mut keys = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| unreadable(format!("line {line:?} is not key=value")))?;
        keys.insert(k.trim().to_string(), v.trim().to_string());
    }
    let get = |k: &str| {
        keys.get(k)
            .cloned()
            .ok_or_else(|| unreadable(format!("{k} is missing")))
    };
    let version = get("version")?;
    if version != VERSION {
        return Err(unreadable(format!(
            "version {version} (this build reads {VERSION})"
        )));
    }
    let node_id = get("node.id")?;
    let node_id = node_id
        .parse::<u64>()
        .map_err(|_| unreadable(format!("node.id {node_id:?} is not a node id")))?;
    Ok(Some(MetaProperties {
        cluster_id: get("cluster.id")?,
        node_id,
        directory_id: get("directory.id")?,
        single_node: keys.get(SINGLE_NODE_KEY).is_some_and(|v| v == "true"),
    }))
}

/// Writes `<dir>/meta.properties` durably (temporary, fsync, rename, directory fsync).
pub fn write(dir: &Path, props: &MetaProperties) -> Result<(), FormatError> {
    std::fs::create_dir_all(dir).map_err(|source| FormatError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut text = String::from("#Written by borges storage format\n");
    text.push_str(&format!("cluster.id={}\n", props.cluster_id));
    text.push_str(&format!("directory.id={}\n", props.directory_id));
    text.push_str(&format!("node.id={}\n", props.node_id));
    if props.single_node {
        text.push_str(&format!("{SINGLE_NODE_KEY}=true\n"));
    }
    text.push_str(&format!("version={VERSION}\n"));
    let path = dir.join(META_PROPERTIES);
    borges_runtime::fs::write_atomic(&path, text.as_bytes())
        .map_err(|source| FormatError::Io { path, source })
}

/// `borges storage format`: stamps `dir` for node `node_id` of cluster `cluster_id`. A
/// directory formatted already is refused unless `ignore_formatted` and it names the same
/// cluster and node; a directory whose Raft state names another cluster is refused always.
pub fn format(
    dir: &Path,
    cluster_id: &str,
    node_id: u64,
    ignore_formatted: bool,
) -> Result<MetaProperties, FormatError> {
    check_cluster_id(cluster_id)?;
    if let Some(found) = read(dir)? {
        let same = found.cluster_id == cluster_id && found.node_id == node_id;
        if !(ignore_formatted && same && !found.single_node) {
            return Err(FormatError::AlreadyFormatted {
                dir: dir.to_path_buf(),
                cluster_id: found.cluster_id,
                node_id: found.node_id,
            });
        }
        return Ok(found);
    }
    if let Some(found) = quorum_state_cluster(dir) {
        if found != cluster_id {
            return Err(FormatError::OtherCluster {
                dir: dir.to_path_buf(),
                found,
                expected: cluster_id.to_string(),
                action: "format it",
            });
        }
    }
    let props = MetaProperties {
        cluster_id: cluster_id.to_string(),
        node_id,
        directory_id: random_id(),
        single_node: false,
    };
    write(dir, &props)?;
    Ok(props)
}

/// The cluster id the Raft files under `dir` name, if any.
fn quorum_state_cluster(dir: &Path) -> Option<String> {
    let bytes = std::fs::read(dir.join("meta").join("quorum-state")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("cluster_id")?.as_str().map(str::to_string)
}

/// Start-up check of a cluster member: the directory must be formatted for `node_id`.
/// Returns what it says (the cluster id comes from there).
pub fn check_cluster_member(dir: &Path, node_id: u64) -> Result<MetaProperties, FormatError> {
    let Some(props) = read(dir)? else {
        return Err(FormatError::NotFormatted {
            dir: dir.to_path_buf(),
            node_id,
        });
    };
    if props.single_node {
        return Err(FormatError::SingleNode {
            dir: dir.to_path_buf(),
        });
    }
    if props.node_id != node_id {
        return Err(FormatError::OtherNode {
            dir: dir.to_path_buf(),
            found: props.node_id,
            expected: node_id,
            cluster_id: props.cluster_id,
        });
    }
    Ok(props)
}

/// Start-up of the single-node broker: stamps the directory on first start; a directory
/// formatted for a cluster is refused (its metadata lives in the cluster's Raft log).
pub fn ensure_single_node(dir: &Path, node_id: u64) -> Result<MetaProperties, FormatError> {
    match read(dir)? {
        Some(props) if props.single_node => Ok(props),
        Some(props) => Err(FormatError::OtherCluster {
            dir: dir.to_path_buf(),
            found: props.cluster_id,
            expected: "none (single-node mode)".into(),
            action: "start a single-node broker on it (give --controller-voters to start it \
                     as the cluster member it was formatted for)",
        }),
        None => {
            let props = MetaProperties {
                cluster_id: random_id(),
                node_id,
                directory_id: random_id(),
                single_node: true,
            };
            write(dir, &props)?;
            Ok(props)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_22_url_safe_characters_and_differ() {
        let a = random_id();
        assert_eq!(a.len(), 22);
        assert!(check_cluster_id(&a).is_ok());
        assert_ne!(a, random_id());
        // One id in 64 would start with '-' without the redraw.
        assert!((0..10_000).all(|_| !random_id().starts_with('-')));
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
        assert_eq!(base64_url(b"Man"), "TWFu");
    }

    #[test]
    fn format_then_check_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("n1");
        let err = check_cluster_member(&d, 1).unwrap_err();
        assert!(err.to_string().contains("borges storage format"), "{err}");
        let props = format(&d, "abc_DEF-1", 1, false).unwrap();
        assert_eq!(check_cluster_member(&d, 1).unwrap(), props);
        let other = check_cluster_member(&d, 2).unwrap_err();
        assert!(
            other.to_string().contains("formatted for node 1"),
            "{other}"
        );
        assert!(matches!(
            format(&d, "abc_DEF-1", 1, false),
            Err(FormatError::AlreadyFormatted { .. })
        ));
        assert_eq!(format(&d, "abc_DEF-1", 1, true).unwrap(), props);
        assert!(format(&d, "other", 1, true).is_err());
        assert!(ensure_single_node(&d, 1).is_err());
        assert!(format(&dir.path().join("x"), "bad id", 1, false).is_err());
    }

    #[test]
    fn single_node_stamps_itself_once_and_is_refused_as_a_member() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure_single_node(dir.path(), 0).unwrap();
        assert_eq!(ensure_single_node(dir.path(), 0).unwrap(), first);
        assert!(matches!(
            check_cluster_member(dir.path(), 0),
            Err(FormatError::SingleNode { .. })
        ));
    }

    #[test]
    fn format_refuses_raft_files_of_another_cluster() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("meta")).unwrap();
        std::fs::write(
            dir.path().join("meta/quorum-state"),
            br#"{"cluster_id":"old"}"#,
        )
        .unwrap();
        let err = format(dir.path(), "new", 1, false).unwrap_err();
        assert!(err.to_string().contains("belongs to cluster old"), "{err}");
    }
}
