//! Broker configuration: embedded defaults < TOML file (`--config`) < environment < flags.
//!
//! Every limit is named `*_max` with its unit. [`BrokerConfig::validate`] checks relations
//! between settings once at start-up, so that the rest of the broker can rely on them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::BrokerError;

/// Durability policy of a partition log (topic config `durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityPolicy {
    /// Group-commit fdatasync: every flush is followed by one fdatasync shared by every append
    /// in that window; `acks=all` waits for it.
    Fsync,
    /// fdatasync every `flush_interval_ms`; acknowledgements wait only for the device write.
    Interval,
    /// Never fdatasync (durability left to replication).
    None,
}

impl DurabilityPolicy {
    /// Parses the topic-config spelling (`fsync`, `interval`, `none`).
    pub fn parse(s: &str) -> Option<DurabilityPolicy> {
        match s {
            "fsync" => Some(DurabilityPolicy::Fsync),
            "interval" => Some(DurabilityPolicy::Interval),
            "none" => Some(DurabilityPolicy::None),
            _ => None,
        }
    }

    /// The topic-config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityPolicy::Fsync => "fsync",
            DurabilityPolicy::Interval => "interval",
            DurabilityPolicy::None => "none",
        }
    }
}

/// Whole-broker configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerConfig {
    /// This broker's id (Kafka's `node.id`; TOML also `node_id`).
    #[serde(alias = "node_id")]
    pub broker_id: i32,
    /// Where partitions, metadata and checkpoints live.
    pub data_dir: PathBuf,
    /// Main listener, served by every core (SO_REUSEPORT).
    pub listen: String,
    /// Host advertised in Metadata; defaults to the listen host.
    pub advertised_host: Option<String>,
    /// First per-core port: core N listens on `core_port_base + N`. Unset: listen port + 1.
    /// 0: an ephemeral port per core (advertised in Metadata and the ready file).
    pub core_port_base: Option<u16>,
    /// Executor cores; 0 = one per CPU available to the process.
    pub cores: usize,
    /// Prometheus text endpoint; empty disables it.
    pub metrics_listen: String,
    /// When set, a JSON file with the bound addresses is written here once every core serves.
    pub ready_file: Option<PathBuf>,
    /// Connection and request limits.
    pub limits: LimitsConfig,
    /// Defaults for topic configs.
    pub log: LogDefaults,
    /// Storage engine settings (per core).
    pub storage: StorageSettings,
    /// Fetch path settings.
    pub fetch: FetchSettings,
    /// Consumer group settings.
    pub groups: GroupSettings,
    /// Idempotent-producer state settings.
    pub producers: ProducerSettings,
    /// Thread-per-core runtime settings.
    pub runtime: RuntimeSettings,
    /// Cluster membership (absent: the single-node default).
    pub cluster: crate::cluster_config::ClusterSettings,
    /// The metrics endpoint's series and connections.
    pub metrics: MetricsSettings,
    /// TLS on the client listeners and the links between brokers (absent: plaintext).
    pub tls: TlsSettings,
    /// SASL/SCRAM authentication on the client listeners (absent: none).
    pub sasl: SaslSettings,
    /// Authorization with ACLs (absent: off, every request allowed).
    pub security: SecuritySettings,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            broker_id: 0,
            data_dir: PathBuf::from("./borges-data"),
            listen: "127.0.0.1:9292".to_string(),
            advertised_host: None,
            core_port_base: None,
            cores: 0,
            metrics_listen: "127.0.0.1:9464".to_string(),
            ready_file: None,
            limits: LimitsConfig::default(),
            log: LogDefaults::default(),
            storage: StorageSettings::default(),
            fetch: FetchSettings::default(),
            groups: GroupSettings::default(),
            producers: ProducerSettings::default(),
            runtime: RuntimeSettings::default(),
            cluster: crate::cluster_config::ClusterSettings::default(),
            metrics: MetricsSettings::default(),
            tls: TlsSettings::default(),
            sasl: SaslSettings::default(),
            security: SecuritySettings::default(),
        }
    }
}

/// TLS (rustls): with `cert_file` and `key_file` every client listener (the main address and
/// every per-core port) speaks only TLS, fetches take the copy path (no sendfile), and in a
/// cluster the follower fetches and the controller link use TLS too. Files are PEM, re-read on
/// SIGHUP (established connections keep their session).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// This broker's certificate chain (leaf first).
    pub cert_file: Option<PathBuf>,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA certificates for client authentication (mTLS): when set, every client must present
    /// a certificate signed by one of them; its subject is the connection's principal.
    pub client_ca_file: Option<PathBuf>,
    /// CA certificates this broker trusts when it connects to other brokers (follower
    /// fetches, controller link); unset: `client_ca_file`. A cluster with TLS needs one.
    pub ca_file: Option<PathBuf>,
    /// A TLS handshake must complete within this long of the connection's accept.
    pub handshake_timeout_ms: u64,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            ca_file: None,
            handshake_timeout_ms: 10_000,
        }
    }
}

impl TlsSettings {
    /// Whether the client listeners speak TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// The files, when TLS is on.
    pub fn paths(&self) -> Option<borges_runtime::tls::TlsPaths> {
        Some(borges_runtime::tls::TlsPaths {
            cert: self.cert_file.clone()?,
            key: self.key_file.clone()?,
            client_ca: self.client_ca_file.clone(),
            ca: self.ca_file.clone(),
        })
    }

    fn validate(&self, cluster: bool) -> Result<(), String> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("tls.cert_file and tls.key_file go together: set both or neither".into());
        }
        if !self.enabled() && (self.client_ca_file.is_some() || self.ca_file.is_some()) {
            return Err(
                "tls.client_ca_file and tls.ca_file need tls.cert_file and tls.key_file".into(),
            );
        }
        if self.handshake_timeout_ms == 0 {
            return Err("tls.handshake_timeout_ms must be positive".into());
        }
        if cluster && self.enabled() && self.ca_file.is_none() && self.client_ca_file.is_none() {
            return Err(
                "a cluster member with TLS needs tls.ca_file (or tls.client_ca_file): \
                 the CA it verifies other brokers' certificates with"
                    .into(),
            );
        }
        Ok(())
    }
}

/// SASL/SCRAM authentication on every client listener (docs/operations.md, "SASL"): with
/// `mechanisms` set, a connection is served nothing but ApiVersions and the SASL requests until
/// it has authenticated as a user of the credentials file (docs/protocol.md, 4.20).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SaslSettings {
    /// Mechanisms the listeners accept: "SCRAM-SHA-256", "SCRAM-SHA-512"; empty: SASL off.
    pub mechanisms: Vec<String>,
    /// The credentials file (`borges user create`); unset: `sasl-credentials.toml` in the
    /// data directory. Re-read when it changes (checked every second) and on SIGHUP.
    pub credentials_file: Option<PathBuf>,
    /// Failed authentications a connection may have; the last one closes it.
    pub failed_attempts_max: u32,
    /// A connection must have authenticated within this long of its accept.
    pub authentication_timeout_ms: u64,
    /// Largest frame a connection may send before it has authenticated.
    pub unauthenticated_frame_size_bytes_max: u32,
    /// The mechanism this broker's follower fetches authenticate to other brokers with
    /// (Kafka's `sasl.mechanism.inter.broker.protocol`); unset: the first of `mechanisms`.
    pub inter_broker_mechanism: Option<String>,
    /// The user this broker's follower fetches authenticate as (a cluster with SASL needs
    /// one; in Kafka the broker principal, which belongs in `security.super_users`).
    pub inter_broker_username: Option<String>,
    /// The file holding the inter-broker user's password (its first line); read at start-up.
    pub inter_broker_password_file: Option<PathBuf>,
}

impl Default for SaslSettings {
    fn default() -> Self {
        SaslSettings {
            mechanisms: Vec::new(),
            credentials_file: None,
            failed_attempts_max: 3,
            authentication_timeout_ms: 10_000,
            unauthenticated_frame_size_bytes_max: 8192,
            inter_broker_mechanism: None,
            inter_broker_username: None,
            inter_broker_password_file: None,
        }
    }
}

/// The credentials file's name in the data directory when `sasl.credentials_file` is unset.
pub const SASL_CREDENTIALS_FILE_NAME: &str = "sasl-credentials.toml";

impl SaslSettings {
    /// Whether the client listeners require authentication.
    pub fn enabled(&self) -> bool {
        !self.mechanisms.is_empty()
    }

    /// The credentials file.
    pub fn credentials_path(&self, data_dir: &std::path::Path) -> PathBuf {
        match &self.credentials_file {
            Some(p) => p.clone(),
            None => data_dir.join(SASL_CREDENTIALS_FILE_NAME),
        }
    }

    /// The enabled mechanisms (validated: unknown names were refused).
    pub fn parsed_mechanisms(&self) -> Vec<borges_protocol::scram::Mechanism> {
        self.mechanisms
            .iter()
            .filter_map(|m| borges_protocol::scram::Mechanism::from_name(m))
            .collect()
    }

    /// The mechanism of follower fetches: `inter_broker_mechanism`, else the first enabled.
    pub fn inter_broker_mechanism(&self) -> Option<borges_protocol::scram::Mechanism> {
        match &self.inter_broker_mechanism {
            Some(m) => borges_protocol::scram::Mechanism::from_name(m),
            None => self.parsed_mechanisms().first().copied(),
        }
    }

    fn validate_inter_broker(&self, cluster: bool) -> Result<(), String> {
        let user = self.inter_broker_username.is_some();
        let password = self.inter_broker_password_file.is_some();
        if !self.enabled() {
            if user || password || self.inter_broker_mechanism.is_some() {
                return Err(
                    "sasl.inter_broker_*: set sasl.mechanisms too (every member of \
                            a cluster has SASL on or off alike)"
                        .into(),
                );
            }
            return Ok(());
        }
        if let Some(m) = &self.inter_broker_mechanism {
            if !self.mechanisms.iter().any(|e| e == m) {
                return Err(format!(
                    "sasl.inter_broker_mechanism {m:?} is not one of sasl.mechanisms"
                ));
            }
        }
        if user != password {
            return Err(
                "sasl.inter_broker_username and sasl.inter_broker_password_file \
                        go together"
                    .into(),
            );
        }
        if cluster && !user {
            return Err("sasl in a cluster: set sasl.inter_broker_username and \
                        sasl.inter_broker_password_file (the user follower fetches \
                        authenticate to the leaders as)"
                .into());
        }
        if let Some(u) = &self.inter_broker_username {
            let size_max = borges_protocol::scram::USERNAME_SIZE_BYTES_MAX;
            if u.is_empty() || u.len() > size_max || u.chars().any(char::is_control) {
                return Err(format!(
                    "sasl.inter_broker_username: 1..={size_max} bytes, no control characters"
                ));
            }
        }
        Ok(())
    }

    fn validate(&self, cluster: bool) -> Result<(), String> {
        for m in &self.mechanisms {
            if borges_protocol::scram::Mechanism::from_name(m).is_none() {
                return Err(format!(
                    "sasl.mechanisms: unknown mechanism {m:?} (SCRAM-SHA-256, SCRAM-SHA-512)"
                ));
            }
        }
        if self.failed_attempts_max == 0 {
            return Err("sasl.failed_attempts_max must be at least 1".into());
        }
        if self.authentication_timeout_ms == 0 {
            return Err("sasl.authentication_timeout_ms must be positive".into());
        }
        let min = borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN;
        if self.unauthenticated_frame_size_bytes_max < min {
            return Err(format!(
                "sasl.unauthenticated_frame_size_bytes_max must be at least {min}"
            ));
        }
        self.validate_inter_broker(cluster)?;
        Ok(())
    }
}

/// Authorization with ACLs in Kafka's model (docs/operations.md, "ACLs"). Off by default:
/// every request is allowed. On: a request needs an ACL that allows its operation on its
/// resources (no ACL: denied), unless its principal is a super user.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SecuritySettings {
    /// Check every request against the ACLs.
    pub authorizer_enabled: bool,
    /// Principals allowed everything (`User:admin`, `User:CN=broker,O=Example` for a
    /// certificate subject); in a cluster, the brokers' own principals belong here.
    pub super_users: Vec<String>,
    /// The ACLs file (CreateAcls, DeleteAcls); unset: `acls.toml` in the data directory.
    pub acls_file: Option<PathBuf>,
    /// Most ACLs the broker holds; CreateAcls beyond it is refused with LimitExceeded.
    pub acls_max: u32,
}

impl Default for SecuritySettings {
    fn default() -> Self {
        SecuritySettings {
            authorizer_enabled: false,
            super_users: Vec::new(),
            acls_file: None,
            acls_max: 10_000,
        }
    }
}

/// The ACLs file's name in the data directory when `security.acls_file` is unset.
pub const ACLS_FILE_NAME: &str = "acls.toml";

/// Upper bound of `security.acls_max` (each check scans the ACLs of its resource type).
pub const ACLS_MAX_MAX: u32 = 1_000_000;

impl SecuritySettings {
    /// The ACLs file.
    pub fn acls_path(&self, data_dir: &std::path::Path) -> PathBuf {
        match &self.acls_file {
            Some(p) => p.clone(),
            None => data_dir.join(ACLS_FILE_NAME),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.acls_max == 0 || self.acls_max > ACLS_MAX_MAX {
            return Err(format!("security.acls_max must be 1..={ACLS_MAX_MAX}"));
        }
        for p in &self.super_users {
            borges_protocol::acl::check_principal(p)
                .map_err(|e| format!("security.super_users: {e}"))?;
        }
        Ok(())
    }
}

/// The metrics endpoint (`metrics_listen`): what it serves and to how many at once.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// Per-partition series (offsets, sizes, segments, committed offsets and lag per
    /// partition); `false` is the low-cardinality mode: per-topic series only.
    pub partition_series: bool,
    /// Series per family at most; beyond it the rest (in label order) are left out and
    /// counted in `borges_metrics_series_omitted{family}`.
    pub series_per_family_max: u32,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            partition_series: true,
            series_per_family_max: 10_000,
        }
    }
}

/// Connection and request limits.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest frame accepted (header + message + payload).
    pub frame_size_bytes_max: u32,
    /// Largest first frame of a connection (a connection that has not completed a frame yet
    /// gets a smaller budget than an established one); at most `frame_size_bytes_max` applies.
    pub first_frame_size_bytes_max: u32,
    /// A frame must arrive whole within this long of its first byte (waits for request memory
    /// included), or the connection is closed with a typed error.
    pub frame_read_timeout_ms: u64,
    /// Connections per broker (split evenly over cores).
    pub connections_max: u32,
    /// Requests a connection may have in flight before the broker stops reading from it.
    pub in_flight_requests_per_connection_max: u32,
    /// Bytes of request frames a core holds in flight across its connections.
    pub request_memory_bytes_max_per_core: u64,
    /// Connections idle this long are closed.
    pub connection_idle_timeout_ms: u64,
    /// Depth of each cross-core channel, in messages.
    pub cross_core_queue_depth_max: usize,
    /// Topics in the cluster.
    pub topics_max: u32,
    /// Partitions per topic.
    pub partitions_per_topic_max: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            frame_size_bytes_max: borges_protocol::frame::FRAME_SIZE_BYTES_MAX_DEFAULT,
            first_frame_size_bytes_max: 16 * 1024 * 1024,
            frame_read_timeout_ms: 5_000,
            connections_max: 10_000,
            in_flight_requests_per_connection_max: 128,
            request_memory_bytes_max_per_core: 512 * 1024 * 1024,
            connection_idle_timeout_ms: 10 * 60 * 1000,
            cross_core_queue_depth_max: 1024,
            topics_max: 100_000,
            partitions_per_topic_max: 100_000,
        }
    }
}

impl LimitsConfig {
    /// Checks the limits and the relations between them.
    fn validate(&self) -> Result<(), BrokerError> {
        let fail = |m: String| Err(BrokerError::Config(m));
        let l = self;
        if l.frame_size_bytes_max < borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN {
            return fail(format!(
                "limits.frame_size_bytes_max must be at least {}",
                borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN
            ));
        }
        if l.first_frame_size_bytes_max < borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN {
            return fail(format!(
                "limits.first_frame_size_bytes_max must be at least {}",
                borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN
            ));
        }
        if l.frame_read_timeout_ms == 0 {
            return fail("limits.frame_read_timeout_ms must be positive".into());
        }
        if u64::from(l.frame_size_bytes_max) > l.request_memory_bytes_max_per_core {
            return fail("limits.request_memory_bytes_max_per_core must hold at least one frame of limits.frame_size_bytes_max".into());
        }
        if l.connections_max == 0 || l.in_flight_requests_per_connection_max == 0 {
            return fail("limits.connections_max and limits.in_flight_requests_per_connection_max must be positive".into());
        }
        if l.cross_core_queue_depth_max == 0 {
            return fail("limits.cross_core_queue_depth_max must be positive".into());
        }
        Ok(())
    }
}

/// Broker-wide defaults of topic configs; a topic overrides them with Kafka's dotted names.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogDefaults {
    /// `num.partitions`.
    pub num_partitions: u32,
    /// `segment.bytes`.
    pub segment_size_bytes: u64,
    /// `segment.ms`.
    pub segment_ms: u64,
    /// `index.interval.bytes`.
    pub index_interval_bytes: u32,
    /// `retention.ms`; -1 keeps forever.
    pub retention_ms: i64,
    /// `retention.bytes`; -1 means no size cap.
    pub retention_bytes: i64,
    /// `durability`: fsync (group commit), interval, none.
    pub durability: DurabilityPolicy,
    /// `flush.ms`: fdatasync interval for `durability=interval`.
    pub flush_interval_ms: u64,
    /// `max.message.bytes`: largest record batch accepted.
    pub max_message_bytes: u32,
    /// `cleanup.policy`: delete, compact, or compact,delete.
    pub cleanup_policy: String,
}

impl Default for LogDefaults {
    fn default() -> Self {
        LogDefaults {
            num_partitions: 1,
            segment_size_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_ms: 168 * 3600 * 1000,
            retention_bytes: -1,
            durability: DurabilityPolicy::Fsync,
            flush_interval_ms: 1000,
            max_message_bytes: 8 * 1024 * 1024,
            cleanup_policy: "delete".to_string(),
        }
    }
}

/// Storage engine settings, per core.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSettings {
    /// Appended bytes not yet written to the device, per core; producers wait beyond it.
    pub write_buffer_bytes_max: u64,
    /// Recent batches kept in memory for tail reads, per core.
    pub tail_cache_bytes_max: u64,
    /// Open segment files per core (closed segments are reopened on demand).
    pub open_files_max: u32,
    /// Segment writers per core that keep their three files open (idle ones close beyond it).
    pub open_writers_max: u32,
    /// Below this many free bytes the core's log directory turns read-only (produce answered
    /// `DiskFull`) until the free-space probe sees space again; 0: only a real `ENOSPC` does.
    pub disk_free_bytes_min: u64,
    /// How often each core's log directory probes its free space (`statvfs`).
    pub disk_probe_interval_ms: u64,
    /// How often retention and time-based segment rolls are checked.
    pub retention_check_interval_ms: u64,
    /// How often the recovery-point checkpoint is written.
    pub recovery_checkpoint_interval_ms: u64,
    /// Recovery checkpoints per second per core, at most (many busy partitions checkpoint
    /// less often each).
    pub recovery_checkpoints_per_s_max: u32,
    /// Log cleaner: memory of one cleaning's offset map (key -> latest offset), per core.
    pub cleaner_dedupe_buffer_bytes: u64,
    /// Log cleaner: bytes read plus written per second, per core.
    pub cleaner_io_bytes_per_s_max: u64,
    /// Log cleaner: size of one read and one write.
    pub cleaner_io_buffer_bytes: u64,
    /// Log cleaner: pause between two looks for a partition to clean (Kafka's
    /// `log.cleaner.backoff.ms`).
    pub cleaner_backoff_ms: u64,
    /// How long a corrupt log moved aside for repair (`<topic>-<partition>.corrupt-<ms>`) is
    /// kept for inspection once its replica is repaired; checked every
    /// `retention_check_interval_ms`; -1: kept until removed by hand.
    pub quarantine_retention_ms: i64,
}

impl Default for StorageSettings {
    fn default() -> Self {
        StorageSettings {
            write_buffer_bytes_max: 256 * 1024 * 1024,
            tail_cache_bytes_max: 256 * 1024 * 1024,
            open_files_max: 4096,
            open_writers_max: 1024,
            disk_free_bytes_min: 64 * 1024 * 1024,
            disk_probe_interval_ms: 1_000,
            retention_check_interval_ms: 30_000,
            recovery_checkpoint_interval_ms: 1_000,
            recovery_checkpoints_per_s_max: 100,
            cleaner_dedupe_buffer_bytes: 16 << 20,
            cleaner_io_bytes_per_s_max: 64 << 20,
            cleaner_io_buffer_bytes: 1 << 20,
            cleaner_backoff_ms: 15_000,
            quarantine_retention_ms: 7 * 24 * 3_600_000,
        }
    }
}

impl StorageSettings {
    /// The per-core cleaner limits.
    pub fn cleaner(&self) -> borges_storage::CleanerConfig {
        borges_storage::CleanerConfig {
            dedupe_buffer_bytes: self.cleaner_dedupe_buffer_bytes,
            io_bytes_per_s_max: self.cleaner_io_bytes_per_s_max,
            io_buffer_bytes: self.cleaner_io_buffer_bytes.min(1 << 30) as usize,
        }
    }
}

/// How fetch responses send file data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FetchSendMode {
    /// sendfile from the page cache (zero copy).
    Sendfile,
    /// Read into memory, then write (the path TLS uses).
    Copy,
}

/// Fetch path settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchSettings {
    /// How file-backed fetch data is sent.
    pub send_mode: FetchSendMode,
    /// Upper bound on a fetch's `max_wait_ms`.
    pub max_wait_ms_max: u32,
    /// Upper bound on a fetch's `max_bytes`.
    pub response_bytes_max: u32,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings {
            send_mode: FetchSendMode::Sendfile,
            max_wait_ms_max: 30_000,
            response_bytes_max: 64 * 1024 * 1024,
        }
    }
}

/// Consumer group settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupSettings {
    /// Default session timeout: a member silent this long is removed.
    pub session_timeout_ms: u32,
    /// Smallest session timeout a member may ask for.
    pub session_timeout_ms_min: u32,
    /// Largest session timeout a member may ask for.
    pub session_timeout_ms_max: u32,
    /// Heartbeat interval told to members.
    pub heartbeat_interval_ms: u32,
    /// Members per group.
    pub group_members_max: u32,
    /// Partitions of `__consumer_offsets`.
    pub offsets_topic_partitions: u32,
    /// Longest committed-offset metadata string.
    pub offset_metadata_bytes_max: u32,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            session_timeout_ms: 45_000,
            session_timeout_ms_min: 1_000,
            session_timeout_ms_max: 300_000,
            heartbeat_interval_ms: 5_000,
            group_members_max: 1_000,
            offsets_topic_partitions: 16,
            offset_metadata_bytes_max: 4096,
        }
    }
}

/// Idempotent-producer state settings (per partition, on the partition's owning core).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProducerSettings {
    /// A producer whose newest batch timestamp is this old is forgotten (Kafka's
    /// `producer.id.expiration.ms`); its retries after that are appended again.
    pub producer_id_expiration_ms: u64,
    /// How often expired producers are looked for.
    pub producer_id_expiration_check_interval_ms: u64,
    /// Producers remembered per partition; beyond it the least recently active are forgotten.
    pub producers_per_partition_max: u32,
    /// A partition whose producer state changed writes a snapshot at most this often; recovery
    /// replays the log after the newest snapshot.
    pub producer_snapshot_interval_ms: u64,
}

impl ProducerSettings {
    /// Every setting positive (and the expiration within an i64 of milliseconds).
    fn validate(&self) -> Result<(), String> {
        let positive = self.producer_id_expiration_ms > 0
            && self.producer_id_expiration_ms <= i64::MAX as u64
            && self.producer_id_expiration_check_interval_ms > 0
            && self.producers_per_partition_max > 0
            && self.producer_snapshot_interval_ms > 0;
        if positive {
            return Ok(());
        }
        Err(concat!(
            "producers.producer_id_expiration_ms, producer_id_expiration_check_interval_ms, ",
            "producers_per_partition_max and producer_snapshot_interval_ms must be positive"
        )
        .into())
    }
}

impl Default for ProducerSettings {
    fn default() -> Self {
        ProducerSettings {
            producer_id_expiration_ms: 24 * 3600 * 1000,
            producer_id_expiration_check_interval_ms: 10 * 60 * 1000,
            producers_per_partition_max: 50_000,
            producer_snapshot_interval_ms: 1_000,
        }
    }
}

/// Thread-per-core runtime settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSettings {
    /// Registered IO memory per ring; unset sizes it from RLIMIT_MEMLOCK.
    pub io_memory_bytes: Option<usize>,
    /// Preemption timer.
    pub preempt_timer_ms: u64,
    /// Busy-poll before parking (0 disables).
    pub spin_before_park_us: u64,
    /// Wake each core at least this often (0 disables); bounds a glommio 0.9.0 scheduler bug
    /// that can park a core with runnable tasks (see `borges_runtime::executor::stall_guard`).
    pub stall_guard_us: u64,
    /// Longest stall-guard period while a core is idle: above `stall_guard_us` the guard backs
    /// off by doubling and returns to `stall_guard_us` on the next request, saving idle CPU at
    /// the price of up to this much extra latency for the first request after an idle spell.
    pub stall_guard_idle_us: u64,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        RuntimeSettings {
            io_memory_bytes: None,
            preempt_timer_ms: 2,
            spin_before_park_us: 0,
            stall_guard_us: 1000,
            stall_guard_idle_us: 1000,
        }
    }
}

/// A toml error as toml renders it (line, column, the line), with a suggestion for a
/// misspelt key.
fn explain(e: &toml::de::Error) -> String {
    let text = e.to_string();
    let text = text.trim_end();
    match suggest(text) {
        Some(key) => format!("{text}\ndid you mean `{key}`?"),
        None => text.to_string(),
    }
}

/// For "unknown field `x`, expected one of `a`, `b`": the expected key closest to `x`.
fn suggest(message: &str) -> Option<String> {
    let rest = message.split("unknown field `").nth(1)?;
    let (unknown, expected) = rest.split_once('`')?;
    let candidates = expected.split('`').skip(1).step_by(2);
    let (distance, best) = candidates
        .map(|c| (edit_distance(unknown, c), c))
        .min_by_key(|(d, _)| *d)?;
    (distance <= (unknown.len() / 3).max(2)).then(|| best.to_string())
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// `HOST:PORT` as an address: an IP address as is, a host name through the system resolver
/// (its first IPv4 address, else its first address).
pub fn resolve_address(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(a) = text.parse() {
        return Ok(a);
    }
    let found: Vec<std::net::SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("{text:?} is not HOST:PORT or its host does not resolve: {e}"))?
        .collect();
    let first = found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied();
    first.ok_or_else(|| format!("{text:?}: the host resolves to no address"))
}

impl BrokerConfig {
    /// Replaces host names in `listen` and `metrics_listen` with the addresses they resolve
    /// to (the rest of the broker binds and compares addresses); a listen host name becomes
    /// the advertised host unless one is set.
    pub fn resolve_hosts(&mut self) -> Result<(), BrokerError> {
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            let addr = resolve_address(&self.listen)
                .map_err(|e| BrokerError::Config(format!("listen = {e}")))?;
            if self.advertised_host.is_none() {
                let host = self.listen.rsplit_once(':').map(|(h, _)| h.to_string());
                self.advertised_host = host;
            }
            self.listen = addr.to_string();
        }
        if !self.metrics_listen.is_empty()
            && self.metrics_listen.parse::<std::net::SocketAddr>().is_err()
        {
            let addr = resolve_address(&self.metrics_listen)
                .map_err(|e| BrokerError::Config(format!("metrics_listen = {e}")))?;
            self.metrics_listen = addr.to_string();
        }
        Ok(())
    }

    /// Reads a TOML file over the embedded defaults.
    pub fn from_toml_file(path: &std::path::Path) -> Result<BrokerConfig, BrokerError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            BrokerError::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        toml::from_str(&text).map_err(|e| BrokerError::ConfigFile {
            path: path.to_path_buf(),
            message: explain(&e),
        })
    }

    /// Parses TOML over the embedded defaults.
    pub fn from_toml_str(text: &str) -> Result<BrokerConfig, BrokerError> {
        toml::from_str(text).map_err(|e| BrokerError::Config(explain(&e)))
    }

    /// The configuration as TOML (what `borges broker --print-config` prints): every key,
    /// with the optional ones that are unset named in a comment.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).unwrap_or_else(|e| format!("# not printable: {e}\n"));
        let unset: Vec<&str> = [
            ("advertised_host", self.advertised_host.is_none()),
            ("core_port_base", self.core_port_base.is_none()),
            ("ready_file", self.ready_file.is_none()),
            (
                "runtime.io_memory_bytes",
                self.runtime.io_memory_bytes.is_none(),
            ),
            (
                "cluster.controller_listen",
                self.cluster.controller_listen.is_none(),
            ),
            ("tls.cert_file", self.tls.cert_file.is_none()),
            ("tls.key_file", self.tls.key_file.is_none()),
            ("tls.client_ca_file", self.tls.client_ca_file.is_none()),
            ("tls.ca_file", self.tls.ca_file.is_none()),
            (
                "sasl.credentials_file",
                self.sasl.credentials_file.is_none(),
            ),
            (
                "sasl.inter_broker_mechanism",
                self.sasl.inter_broker_mechanism.is_none(),
            ),
            (
                "sasl.inter_broker_username",
                self.sasl.inter_broker_username.is_none(),
            ),
            (
                "sasl.inter_broker_password_file",
                self.sasl.inter_broker_password_file.is_none(),
            ),
            ("security.acls_file", self.security.acls_file.is_none()),
        ]
        .into_iter()
        .filter_map(|(key, unset)| unset.then_some(key))
        .collect();
        let mut out = String::from(
            "# Effective configuration: embedded defaults < --config file < environment < flags.\n",
        );
        if !unset.is_empty() {
            out.push_str(&format!(
                "# Unset, their defaults apply: {}.\n",
                unset.join(", ")
            ));
        }
        out.push('\n');
        out.push_str(&body);
        out
    }

    /// The storage part of [`BrokerConfig::validate`].
    fn validate_storage(&self) -> Result<(), BrokerError> {
        let fail = |m: &str| Err(BrokerError::Config(m.to_string()));
        let s = &self.storage;
        if s.recovery_checkpoint_interval_ms == 0
            || s.recovery_checkpoints_per_s_max == 0
            || s.retention_check_interval_ms == 0
            || s.open_writers_max == 0
            || s.disk_probe_interval_ms == 0
        {
            return fail(
                "storage.recovery_checkpoint_interval_ms, storage.recovery_checkpoints_per_s_max, \
                 storage.retention_check_interval_ms, storage.open_writers_max and \
                 storage.disk_probe_interval_ms must be positive",
            );
        }
        if s.write_buffer_bytes_max < u64::from(self.log.max_message_bytes) {
            return fail(
                "storage.write_buffer_bytes_max must hold at least one batch of \
                 log.max_message_bytes",
            );
        }
        if s.quarantine_retention_ms < -1 {
            return fail("storage.quarantine_retention_ms must be -1 (forever) or at least 0");
        }
        Ok(())
    }

    /// Checks values and relations between them.
    pub fn validate(&self) -> Result<(), BrokerError> {
        let fail = |m: String| Err(BrokerError::Config(m));
        match self.listen.parse::<std::net::SocketAddr>() {
            Err(_) => {
                return fail(format!(
                    "listen = {:?} is not HOST:PORT (an IP address and a port)",
                    self.listen
                ))
            }
            Ok(a) if a.port() == 0 => {
                return fail(format!(
                    "listen = {:?}: port 0 is not supported, every core binds the same address and clients need to know it (per-core ports may be ephemeral: core_port_base = 0)",
                    self.listen
                ))
            }
            Ok(_) => {}
        }
        if !self.metrics_listen.is_empty()
            && self.metrics_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return fail(format!(
                "metrics_listen = {:?} is not HOST:PORT",
                self.metrics_listen
            ));
        }
        self.limits.validate()?;
        let l = &self.limits;
        if self.log.max_message_bytes >= l.frame_size_bytes_max {
            return fail(
                "log.max_message_bytes must be smaller than limits.frame_size_bytes_max".into(),
            );
        }
        if self.log.num_partitions == 0 || self.log.num_partitions > l.partitions_per_topic_max {
            return fail(
                "log.num_partitions must be between 1 and limits.partitions_per_topic_max".into(),
            );
        }
        if self.log.segment_size_bytes < 1024 * 1024 {
            return fail("log.segment_size_bytes must be at least 1 MiB".into());
        }
        self.validate_storage()?;
        let g = &self.groups;
        if g.session_timeout_ms_min > g.session_timeout_ms_max
            || !(g.session_timeout_ms_min..=g.session_timeout_ms_max)
                .contains(&g.session_timeout_ms)
        {
            return fail("groups.session_timeout_ms must lie within [session_timeout_ms_min, session_timeout_ms_max]".into());
        }
        if g.heartbeat_interval_ms == 0 || g.heartbeat_interval_ms >= g.session_timeout_ms {
            return fail(
                "groups.heartbeat_interval_ms must be positive and below groups.session_timeout_ms"
                    .into(),
            );
        }
        if g.offsets_topic_partitions == 0 {
            return fail("groups.offsets_topic_partitions must be positive".into());
        }
        let cluster = !self.cluster.controller_voters.is_empty();
        self.tls.validate(cluster).map_err(BrokerError::Config)?;
        self.sasl.validate(cluster).map_err(BrokerError::Config)?;
        self.security.validate().map_err(BrokerError::Config)?;
        self.check_cleaner()
    }

    /// The producer limits, the `storage.cleaner_*` limits and the `[metrics]` ones.
    fn check_cleaner(&self) -> Result<(), BrokerError> {
        if self.metrics.series_per_family_max == 0 {
            return Err(BrokerError::Config(
                "metrics.series_per_family_max must be positive".into(),
            ));
        }
        self.producers.validate().map_err(BrokerError::Config)?;
        let checked = self.storage.cleaner().validate();
        checked.map_err(|e| BrokerError::Config(format!("storage: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        BrokerConfig::default().validate().unwrap();
    }

    #[test]
    fn sasl_in_a_cluster_needs_an_inter_broker_user() {
        let mut s = SaslSettings {
            mechanisms: vec!["SCRAM-SHA-256".into(), "SCRAM-SHA-512".into()],
            ..SaslSettings::default()
        };
        s.validate(false).unwrap();
        let e = s.validate(true).unwrap_err();
        assert!(e.contains("sasl.inter_broker_username"), "{e}");
        s.inter_broker_username = Some("broker".into());
        let e = s.validate(true).unwrap_err();
        assert!(e.contains("go together"), "{e}");
        s.inter_broker_password_file = Some("/etc/borges/broker.pw".into());
        s.validate(true).unwrap();
        assert_eq!(
            s.inter_broker_mechanism(),
            Some(borges_protocol::scram::Mechanism::ScramSha256)
        );
        s.inter_broker_mechanism = Some("SCRAM-SHA-512".into());
        s.validate(true).unwrap();
        assert_eq!(
            s.inter_broker_mechanism(),
            Some(borges_protocol::scram::Mechanism::ScramSha512)
        );
        s.mechanisms.truncate(1);
        let e = s.validate(true).unwrap_err();
        assert!(e.contains("not one of sasl.mechanisms"), "{e}");
        s.mechanisms.clear();
        let e = s.validate(true).unwrap_err();
        assert!(e.contains("set sasl.mechanisms too"), "{e}");
    }

    #[test]
    fn the_example_file_is_the_defaults_with_every_key() {
        let text = include_str!("../../config/borges.toml");
        let example = BrokerConfig::from_toml_str(text).unwrap();
        example.validate().unwrap();
        assert_eq!(example.to_toml(), BrokerConfig::default().to_toml());
        // Every key the broker has appears in the example (not only its default).
        fn keys(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, v) in t {
                    let key = format!("{prefix}{k}");
                    keys(v, &format!("{key}."), out);
                    out.push(key);
                }
            }
        }
        let (mut shown, mut all) = (Vec::new(), Vec::new());
        keys(&text.parse::<toml::Value>().unwrap(), "", &mut shown);
        keys(
            &toml::Value::try_from(BrokerConfig::default()).unwrap(),
            "",
            &mut all,
        );
        let missing: Vec<_> = all.iter().filter(|k| !shown.contains(k)).collect();
        assert!(missing.is_empty(), "config/borges.toml lacks {missing:?}");
    }

    #[test]
    fn printed_configuration_reads_back() {
        let mut c = BrokerConfig::default();
        c.log.num_partitions = 7;
        c.core_port_base = Some(0);
        let printed = c.to_toml();
        assert!(printed.contains("Unset, their defaults apply: advertised_host, ready_file"));
        let back = BrokerConfig::from_toml_str(&printed).unwrap();
        assert_eq!(back.to_toml(), printed);
    }

    #[test]
    fn misspelt_keys_get_a_suggestion() {
        let err = BrokerConfig::from_toml_str("[limits]\nconnection_max = 5\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("line 2"), "{text}");
        assert!(text.ends_with("did you mean `connections_max`?"), "{text}");
        let err = BrokerConfig::from_toml_str("zzzzzz = 1\n")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("did you mean"), "{err}");
        assert_eq!(edit_distance("metric", "metrics"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = BrokerConfig::from_toml_str("listen = \"127.0.0.1:1\"\nbogus = 1\n").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn partial_file_keeps_defaults() {
        let c = BrokerConfig::from_toml_str("[log]\nnum_partitions = 3\ndurability = \"none\"\n")
            .unwrap();
        assert_eq!(c.log.num_partitions, 3);
        assert_eq!(c.log.durability, DurabilityPolicy::None);
        assert_eq!(c.listen, "127.0.0.1:9292");
    }

    #[test]
    fn bad_relations_are_refused() {
        let mut c = BrokerConfig::default();
        c.log.max_message_bytes = c.limits.frame_size_bytes_max;
        assert!(c.validate().is_err());
        let c = BrokerConfig {
            listen: "localhost".into(),
            ..Default::default()
        };
        assert!(c.validate().is_err());
        let c = BrokerConfig {
            listen: "127.0.0.1:0".into(),
            ..Default::default()
        };
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("port 0 is not supported"), "{err}");
        let mut c = BrokerConfig::default();
        c.storage.recovery_checkpoints_per_s_max = 0;
        assert!(c.validate().is_err());
        let mut c = BrokerConfig::default();
        c.tls.cert_file = Some("cert.pem".into());
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("tls.cert_file and tls.key_file go together"),
            "{err}"
        );
        c.tls.key_file = Some("key.pem".into());
        c.validate().unwrap();
        c.cluster.controller_voters = vec!["1@127.0.0.1:9393".into()];
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("tls.ca_file"), "{err}");
    }
}
