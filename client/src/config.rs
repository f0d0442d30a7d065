//! Configuration of the client, the producer and the consumer. Every limit is named `*_max`
//! and carries its unit; [`ClientConfig::validate`], [`ProducerConfig::validate`] and
//! [`ConsumerConfig::validate`] check them once, when the component is built.

use std::time::Duration;

use crate::error::{ClientError, Result};

/// Whole milliseconds of `d` (saturating), for the `Duration` setters beside the `_ms` fields.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Chained setters that take a [`Duration`] for `_ms` fields: `$name(Duration)` sets
/// `$field` in whole milliseconds.
macro_rules! duration_setters {
    ($type:ty { $($(#[$doc:meta])* $name:ident => $field:ident,)* }) => {
        impl $type {
            $(
                $(#[$doc])*
                pub fn $name(mut self, duration: Duration) -> Self {
                    self.$field = millis(duration);
                    self
                }
            )*
        }
    };
}

/// Settings shared by every component: where the cluster is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// Bootstrap addresses (`host:port`); any one of them that answers is enough.
    pub bootstrap: Vec<String>,
    /// Sent in ApiVersions; shows up in broker logs and group descriptions.
    pub client_id: String,
    /// How long a request may wait for its response.
    pub request_timeout_ms: u64,
    /// How long a TCP connect may take.
    pub connect_timeout_ms: u64,
    /// Metadata older than this is refreshed even without an error asking for it.
    pub metadata_max_age_ms: u64,
    /// Send each partition's requests straight to the port of the core that owns it
    /// (Metadata `brokers[].cores[]` and `partitions[].leader_core`). Off: use the brokers'
    /// main listeners and let the broker forward across cores.
    pub shard_aware: bool,
    /// Largest response frame accepted.
    pub frame_size_bytes_max: u32,
    /// TLS to every broker (none: plaintext).
    pub tls: Option<TlsConfig>,
    /// SASL/SCRAM authentication of every connection (none: brokers without SASL).
    pub sasl: Option<crate::sasl::SaslConfig>,
}

/// TLS settings of a client: the CAs it verifies brokers' certificates with, and optionally a
/// certificate of its own for brokers that require one (mTLS). Files are PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// CA certificates that sign the brokers' certificates.
    pub ca_file: std::path::PathBuf,
    /// This client's certificate chain (mTLS), with `key_file`.
    pub cert_file: Option<std::path::PathBuf>,
    /// The private key of `cert_file`.
    pub key_file: Option<std::path::PathBuf>,
}

impl TlsConfig {
    /// TLS verifying brokers against the CAs in `ca_file`, without a client certificate.
    pub fn new(ca_file: impl Into<std::path::PathBuf>) -> TlsConfig {
        TlsConfig {
            ca_file: ca_file.into(),
            cert_file: None,
            key_file: None,
        }
    }

    /// Presents this certificate chain and key to brokers that ask for one (mTLS).
    pub fn identity(
        mut self,
        cert_file: impl Into<std::path::PathBuf>,
        key_file: impl Into<std::path::PathBuf>,
    ) -> TlsConfig {
        self.cert_file = Some(cert_file.into());
        self.key_file = Some(key_file.into());
        self
    }

    /// The rustls client configuration these settings make (the files are read now): for
    /// tools that open their own TLS connections.
    pub fn rustls_config(&self) -> Result<std::sync::Arc<rustls::ClientConfig>> {
        crate::tls::client_config(self)
    }
}

impl ClientConfig {
    /// A configuration for the comma-separated bootstrap list `bootstrap` ("h:p,h:p") with
    /// default settings.
    pub fn new(bootstrap: &str) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            ..ClientConfig::default()
        }
    }

    /// Sets `client_id`.
    pub fn client_id(mut self, client_id: impl Into<String>) -> ClientConfig {
        self.client_id = client_id.into();
        self
    }

    /// Sets `request_timeout_ms`.
    pub fn request_timeout_ms(mut self, ms: u64) -> ClientConfig {
        self.request_timeout_ms = ms;
        self
    }

    /// Sets `shard_aware`.
    pub fn shard_aware(mut self, shard_aware: bool) -> ClientConfig {
        self.shard_aware = shard_aware;
        self
    }

    /// Sets `tls` (none: plaintext).
    pub fn tls(mut self, tls: Option<TlsConfig>) -> ClientConfig {
        self.tls = tls;
        self
    }

    /// Sets `sasl` (none: no authentication).
    pub fn sasl(mut self, sasl: Option<crate::sasl::SaslConfig>) -> ClientConfig {
        self.sasl = sasl;
        self
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        if self.bootstrap.is_empty() {
            return Err(ClientError::InvalidConfig(
                "bootstrap is empty: give at least one host:port".into(),
            ));
        }
        for address in &self.bootstrap {
            split_host_port(address)?;
        }
        positive("request_timeout_ms", self.request_timeout_ms)?;
        positive("connect_timeout_ms", self.connect_timeout_ms)?;
        positive("metadata_max_age_ms", self.metadata_max_age_ms)?;
        if let Some(tls) = &self.tls {
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return Err(ClientError::InvalidConfig(
                    "tls: cert_file and key_file go together".into(),
                ));
            }
        }
        if self.frame_size_bytes_max < borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN {
            return Err(ClientError::InvalidConfig(format!(
                "frame_size_bytes_max must be at least {}",
                borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN
            )));
        }
        Ok(())
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap: vec!["127.0.0.1:9292".to_string()],
            client_id: "borges-client".to_string(),
            request_timeout_ms: 30_000,
            connect_timeout_ms: 10_000,
            metadata_max_age_ms: 300_000,
            shard_aware: true,
            frame_size_bytes_max: borges_protocol::frame::FRAME_SIZE_BYTES_MAX_DEFAULT,
            tls: None,
            sasl: None,
        }
    }
}

duration_setters!(ClientConfig {
    /// Sets `request_timeout_ms`.
    request_timeout => request_timeout_ms,
    /// Sets `connect_timeout_ms`.
    connect_timeout => connect_timeout_ms,
    /// Sets `metadata_max_age_ms`.
    metadata_max_age => metadata_max_age_ms,
});

/// Splits `host:port` (IPv6 hosts in brackets: `[::1]:9292`).
pub(crate) fn split_host_port(address: &str) -> Result<(&str, u16)> {
    let bad = || ClientError::InvalidConfig(format!("`{address}` is not host:port"));
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    let port = port.parse::<u16>().map_err(|_| bad())?;
    Ok((host, port))
}

fn positive(name: &str, value: u64) -> Result<()> {
    if value == 0 {
        return Err(ClientError::InvalidConfig(format!(
            "{name} must be positive"
        )));
    }
    Ok(())
}

/// How many acknowledgements a produce request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Acks {
    /// `acks=0`: no response; a record counts as delivered once written to the socket, and its
    /// offset is unknown (-1).
    None,
    /// `acks=1`: the leader wrote it to its log device.
    Leader,
    /// `acks=all` (-1): the broker's durability policy is satisfied (fsync under `fsync`) and,
    /// with replication, every in-sync replica has it.
    #[default]
    All,
}

impl Acks {
    /// The wire value (0, 1, -1).
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// Parses `0`, `1`, `all` or `-1`.
    pub fn parse(text: &str) -> Option<Acks> {
        match text {
            "0" => Some(Acks::None),
            "1" => Some(Acks::Leader),
            "all" | "-1" => Some(Acks::All),
            _ => None,
        }
    }
}

/// Compression codec of produced batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Records travel uncompressed.
    #[default]
    None,
    /// zstd (RecordBatch codec 4).
    Zstd,
}

impl Compression {
    pub(crate) fn to_batch(self) -> borges_protocol::batch::Compression {
        match self {
            Compression::None => borges_protocol::batch::Compression::None,
            Compression::Zstd => borges_protocol::batch::Compression::Zstd,
        }
    }
}

/// Producer settings. Defaults follow Kafka's producer where the names match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Acknowledgement level.
    pub acks: Acks,
    /// How long a partition's batch may wait for more records before it is sent.
    pub linger_ms: u64,
    /// A batch is sent as soon as it holds this many (uncompressed) bytes.
    pub batch_size_bytes: usize,
    /// Codec for batches.
    pub compression: Compression,
    /// zstd level.
    pub compression_level: i32,
    /// Records buffered but not yet acknowledged may take at most this much memory;
    /// `send()` waits (backpressure) while the buffer is full.
    pub buffer_memory_bytes_max: usize,
    /// How often one batch is retried after retriable errors.
    pub retries_max: u32,
    /// First backoff before a retry; doubles per attempt up to `retry_backoff_max_ms`.
    pub retry_backoff_ms: u64,
    /// Largest backoff between retries.
    pub retry_backoff_max_ms: u64,
    /// Upper bound on the time from `send()` to the record's success or failure, retries
    /// included.
    pub delivery_timeout_ms: u64,
    /// Produce requests a connection may have outstanding. Without idempotence and with more
    /// than one, a retried batch can land after a later batch of the same partition (as in
    /// Kafka); with idempotence order is kept whatever this is.
    pub in_flight_requests_per_connection_max: usize,
    /// Largest produce request (frame) the producer builds; also the largest record.
    pub request_size_bytes_max: usize,
    /// How long `send()` may wait for the topic's metadata (and for buffer memory).
    pub max_block_ms: u64,
    /// Idempotent producer (Kafka's `enable.idempotence`, on by default): a producer id from
    /// the broker and sequence numbers per partition, so that retries never duplicate a
    /// record and order is kept across retries with several requests in flight (up to 5
    /// batches per partition). Ignored with `acks=0`, which gets no answers to number batches
    /// by (as Kafka does when idempotence is left at its default); turn it off for brokers
    /// without InitProducerId.
    pub enable_idempotence: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            linger_ms: 5,
            batch_size_bytes: 64 * 1024,
            compression: Compression::None,
            compression_level: 3,
            buffer_memory_bytes_max: 64 << 20,
            retries_max: u32::MAX,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1_000,
            delivery_timeout_ms: 120_000,
            in_flight_requests_per_connection_max: 5,
            request_size_bytes_max: 4 << 20,
            max_block_ms: 60_000,
            enable_idempotence: true,
        }
    }
}

duration_setters!(ProducerConfig {
    /// Sets `linger_ms`.
    linger => linger_ms,
    /// Sets `retry_backoff_ms`.
    retry_backoff => retry_backoff_ms,
    /// Sets `retry_backoff_max_ms`.
    retry_backoff_max => retry_backoff_max_ms,
    /// Sets `delivery_timeout_ms`.
    delivery_timeout => delivery_timeout_ms,
    /// Sets `max_block_ms`.
    max_block => max_block_ms,
});

impl ProducerConfig {
    /// Checks the settings and the relations between them.
    pub fn validate(&self) -> Result<()> {
        positive("batch_size_bytes", self.batch_size_bytes as u64)?;
        positive(
            "in_flight_requests_per_connection_max",
            self.in_flight_requests_per_connection_max as u64,
        )?;
        positive("delivery_timeout_ms", self.delivery_timeout_ms)?;
        positive("retry_backoff_max_ms", self.retry_backoff_max_ms)?;
        if self.request_size_bytes_max < 4096 {
            return Err(ClientError::InvalidConfig(
                "request_size_bytes_max must be at least 4096".into(),
            ));
        }
        if self.buffer_memory_bytes_max < self.batch_size_bytes {
            return Err(ClientError::InvalidConfig(format!(
                "buffer_memory_bytes_max ({}) must be at least batch_size_bytes ({})",
                self.buffer_memory_bytes_max, self.batch_size_bytes
            )));
        }
        if self.retry_backoff_ms > self.retry_backoff_max_ms {
            return Err(ClientError::InvalidConfig(
                "retry_backoff_ms must not exceed retry_backoff_max_ms".into(),
            ));
        }
        Ok(())
    }

    /// Whether the producer numbers its batches: `enable_idempotence`, except with `acks=0`.
    pub fn idempotent(&self) -> bool {
        self.enable_idempotence && self.acks != Acks::None
    }
}

/// Where a consumer starts when it has no valid position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OffsetReset {
    /// The log start offset.
    Earliest,
    /// The high watermark: only new records.
    #[default]
    Latest,
    /// No reset: `poll()` returns `OffsetOutOfRange`.
    None,
}

/// Consumer settings. Defaults follow Kafka's consumer where the names match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// How long the broker may hold a fetch waiting for `fetch_min_bytes`.
    pub fetch_max_wait_ms: u64,
    /// The broker answers once it has this many bytes (or `fetch_max_wait_ms` passed).
    pub fetch_min_bytes: u32,
    /// Largest fetch response requested.
    pub fetch_max_bytes: u32,
    /// Largest amount of data requested per partition (one whole batch is returned even when
    /// it is larger).
    pub partition_fetch_bytes_max: u32,
    /// Where to start without a valid position.
    pub auto_offset_reset: OffsetReset,
    /// Records returned by one `poll()` at most.
    pub max_poll_records: usize,
    /// Limit on one batch's decompressed records (decompression bomb guard).
    pub decompressed_batch_size_bytes_max: usize,
    /// Group mode: the consumer group to join with `Consumer::subscribe` (and to commit to).
    pub group_id: Option<String>,
    /// Group mode: commit positions periodically.
    pub enable_auto_commit: bool,
    /// Group mode: commit period.
    pub auto_commit_interval_ms: u64,
    /// Group mode: a member that does not heartbeat for this long is removed.
    pub session_timeout_ms: u64,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            fetch_max_wait_ms: 500,
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 << 20,
            partition_fetch_bytes_max: 1 << 20,
            auto_offset_reset: OffsetReset::Latest,
            max_poll_records: 500,
            decompressed_batch_size_bytes_max:
                borges_protocol::batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT,
            group_id: None,
            enable_auto_commit: true,
            auto_commit_interval_ms: 5_000,
            session_timeout_ms: 45_000,
        }
    }
}

duration_setters!(ConsumerConfig {
    /// Sets `fetch_max_wait_ms`.
    fetch_max_wait => fetch_max_wait_ms,
    /// Sets `auto_commit_interval_ms`.
    auto_commit_interval => auto_commit_interval_ms,
    /// Sets `session_timeout_ms`.
    session_timeout => session_timeout_ms,
});

impl ConsumerConfig {
    /// Sets `group_id` (group mode).
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// Sets `auto_offset_reset`.
    pub fn auto_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.auto_offset_reset = reset;
        self
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        positive("fetch_max_bytes", u64::from(self.fetch_max_bytes))?;
        positive(
            "partition_fetch_bytes_max",
            u64::from(self.partition_fetch_bytes_max),
        )?;
        positive("max_poll_records", self.max_poll_records as u64)?;
        if self.fetch_max_wait_ms > i32::MAX as u64 {
            return Err(ClientError::InvalidConfig(
                "fetch_max_wait_ms too large".into(),
            ));
        }
        if self.fetch_max_bytes > i32::MAX as u32
            || self.partition_fetch_bytes_max > i32::MAX as u32
        {
            return Err(ClientError::InvalidConfig(
                "fetch sizes must fit in i32".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_list_is_split_and_checked() {
        let c = ClientConfig::new(" a:1 ,b:2,,[::1]:3");
        assert_eq!(c.bootstrap, vec!["a:1", "b:2", "[::1]:3"]);
        c.validate().unwrap();
        assert_eq!(split_host_port("[::1]:3").unwrap(), ("::1", 3));
        assert!(ClientConfig::new("nohost").validate().is_err());
        assert!(ClientConfig::new("h:99999").validate().is_err());
        assert!(ClientConfig::new("").validate().is_err());
    }

    #[test]
    fn acks_parse_and_wire_values() {
        assert_eq!(Acks::parse("all"), Some(Acks::All));
        assert_eq!(Acks::parse("-1").map(Acks::as_i16), Some(-1));
        assert_eq!(Acks::parse("0").map(Acks::as_i16), Some(0));
        assert_eq!(Acks::parse("1").map(Acks::as_i16), Some(1));
        assert_eq!(Acks::parse("2"), None);
    }

    #[test]
    fn duration_setters_set_the_ms_fields() {
        let c = ClientConfig::default().request_timeout(Duration::from_secs(3));
        assert_eq!(c.request_timeout_ms, 3_000);
        let p = ProducerConfig::default()
            .linger(Duration::from_micros(20_900))
            .delivery_timeout(Duration::from_secs(7))
            .max_block(Duration::MAX);
        assert_eq!((p.linger_ms, p.delivery_timeout_ms), (20, 7_000));
        assert_eq!(p.max_block_ms, u64::MAX);
        let c = ConsumerConfig::default()
            .session_timeout(Duration::from_secs(10))
            .fetch_max_wait(Duration::from_millis(100))
            .group_id("g");
        assert_eq!((c.session_timeout_ms, c.fetch_max_wait_ms), (10_000, 100));
        assert_eq!(c.group_id.as_deref(), Some("g"));
    }

    #[test]
    fn producer_config_relations_are_checked() {
        ProducerConfig::default().validate().unwrap();
        let small_buffer = ProducerConfig {
            buffer_memory_bytes_max: 10,
            ..ProducerConfig::default()
        };
        assert!(small_buffer.validate().is_err());
        let backoff = ProducerConfig {
            retry_backoff_ms: 10_000,
            ..ProducerConfig::default()
        };
        assert!(backoff.validate().is_err());
        let acks0 = ProducerConfig {
            acks: Acks::None,
            ..ProducerConfig::default()
        };
        acks0.validate().unwrap();
        assert!(
            !acks0.idempotent(),
            "acks=0 gets no answers to number batches by"
        );
        assert!(ProducerConfig::default().idempotent());
        ConsumerConfig::default().validate().unwrap();
    }
}
