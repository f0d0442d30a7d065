//! The one error type of the SDK.

use std::sync::Arc;

use borges_protocol::batch::BatchError;
use borges_protocol::{DecodeError, ErrorCode};
use thiserror::Error;

/// Shorthand for results of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Everything that can go wrong in the SDK. Errors that a later retry may cure say so through
/// [`ClientError::is_retriable`]; the producer retries those by itself (within `retries_max` and
/// `delivery_timeout_ms`) before it hands them to the application.
///
/// `Clone`, because one failed batch completes the futures of all of its records.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The broker answered with a typed error code (and possibly a message saying why).
    #[error("{}{}", code.name(), message.as_deref().map(|m| format!(": {m}")).unwrap_or_else(|| format!(": {}", code.description())))]
    Broker {
        /// The wire error code.
        code: ErrorCode,
        /// The broker's explanation, when it sent one.
        message: Option<String>,
    },
    /// Connecting to or talking with a broker failed at the socket level.
    #[error("connection to {addr} failed: {source}")]
    Io {
        /// The address (`host:port`) of the peer.
        addr: String,
        /// The underlying IO error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The TLS handshake with a broker failed (a certificate that does not verify, a broker
    /// that does not speak TLS, a refused client certificate), or TLS files could not be used.
    #[error("TLS with {addr}: {message}")]
    Tls {
        /// The address (`host:port`) of the peer, or the file.
        addr: String,
        /// What went wrong.
        message: String,
    },
    /// SASL authentication with a broker failed on the client's side (the broker's own refusals
    /// are [`ClientError::Broker`] with `SaslAuthenticationFailed` and friends): the broker's
    /// SCRAM answer does not verify, for example its signature (it does not hold the
    /// credential).
    #[error("SASL authentication with {addr}: {message}")]
    Authentication {
        /// The address (`host:port`) of the peer.
        addr: String,
        /// What went wrong.
        message: String,
    },
    /// A connection closed while requests were in flight on it.
    #[error("connection to {addr} closed")]
    ConnectionClosed {
        /// The address (`host:port`) of the peer.
        addr: String,
    },
    /// An operation did not complete within its timeout.
    #[error("{what} timed out after {timeout_ms} ms")]
    Timeout {
        /// What timed out.
        what: &'static str,
        /// The timeout that elapsed.
        timeout_ms: u64,
    },
    /// No bootstrap or known broker could be reached to fetch metadata.
    #[error("no broker reachable (tried {tried}): {last}")]
    NoBrokerAvailable {
        /// The addresses tried, comma-separated.
        tried: String,
        /// The last failure.
        last: Box<ClientError>,
    },
    /// A frame or message from the broker could not be decoded (a protocol bug or corruption).
    #[error("undecodable response: {0}")]
    Decode(#[from] DecodeError),
    /// A record batch received from the broker is invalid (CRC, layout, decompression).
    #[error("invalid record batch: {0}")]
    Batch(#[from] BatchError),
    /// A fetched batch failed its checks (CRC, header, records, decompression): disk corruption
    /// the broker's zero-copy path does not see, or data an older broker stored unchecked.
    /// `Consumer::poll` returns every record before it first, then this, on every poll, until
    /// the application seeks past it (`Consumer::skip_corrupt_batch` moves to `next_offset`).
    #[error(
        "corrupt record batch in {topic}-{partition} at offset {offset}: {source}{}",
        skip_hint(*next_offset)
    )]
    CorruptBatch {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The first offset not delivered: the consumer's position.
        offset: i64,
        /// The offset after the batch, when its length could be read.
        next_offset: Option<i64>,
        /// What is wrong with it.
        source: BatchError,
    },
    /// The broker answered something the protocol does not allow (wrong correlation id, missing
    /// partition in a response, ...).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An argument is invalid (for example a partition the topic does not have).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// One record is larger than a limit that applies to it.
    #[error("record of {size_bytes} bytes exceeds {limit} ({size_bytes_max} bytes)")]
    RecordTooLarge {
        /// Encoded size of the record.
        size_bytes: usize,
        /// The limit.
        size_bytes_max: usize,
        /// Which limit.
        limit: &'static str,
    },
    /// The record was not acknowledged within `delivery_timeout_ms`.
    #[error("delivery timed out after {timeout_ms} ms (last error: {last})")]
    DeliveryTimeout {
        /// The delivery timeout.
        timeout_ms: u64,
        /// The last retriable error seen.
        last: Box<ClientError>,
    },
    /// The producer, consumer or connection was closed.
    #[error("{0} is closed")]
    Closed(&'static str),
    /// The feature is not available (yet) in this SDK or on this broker.
    #[error("not supported: {0}")]
    Unsupported(String),
}

impl ClientError {
    /// Whether repeating the same operation later may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Broker { code, .. } => code.is_retriable(),
            ClientError::Io { .. }
            | ClientError::ConnectionClosed { .. }
            | ClientError::Timeout { .. }
            | ClientError::NoBrokerAvailable { .. } => true,
            _ => false,
        }
    }

    /// The wire error code, when the broker sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the client should refresh its metadata before retrying: the partition moved,
    /// the topic is unknown, or the connection to its leader failed or stopped answering (a
    /// request timeout: the broker may be paused or cut off while a new leader took over, as
    /// Kafka's client disconnects and refreshes on a request timeout).
    pub fn needs_metadata_refresh(&self) -> bool {
        match self {
            ClientError::Broker { code, .. } => matches!(
                code,
                ErrorCode::NotLeaderOrFollower
                    | ErrorCode::UnknownTopicOrPartition
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::UnknownLeaderEpoch
                    | ErrorCode::ShuttingDown
            ),
            ClientError::Io { .. }
            | ClientError::ConnectionClosed { .. }
            | ClientError::Timeout { .. }
            | ClientError::NoBrokerAvailable { .. } => true,
            _ => false,
        }
    }

    /// A broker error from a wire code and an optional message; `None` for `ErrorCode::None`.
    pub(crate) fn from_code(code: u16, message: Option<String>) -> Option<ClientError> {
        let code = ErrorCode::from_u16(code);
        if code == ErrorCode::None {
            None
        } else {
            Some(ClientError::Broker {
                code,
                message: message.filter(|m| !m.is_empty()),
            })
        }
    }

    /// Wraps an IO error for `addr`.
    pub(crate) fn io(addr: &str, source: std::io::Error) -> ClientError {
        ClientError::Io {
            addr: addr.to_string(),
            source: Arc::new(source),
        }
    }
}

fn skip_hint(next_offset: Option<i64>) -> String {
    match next_offset {
        Some(n) => format!("; skip to offset {n} to go on"),
        None => "; seek past it to go on".to_string(),
    }
}

/// Returns the broker error for `code`, or `Ok(())` when it is `ErrorCode::None`.
pub(crate) fn check_code(code: u16, message: Option<String>) -> Result<()> {
    match ClientError::from_code(code, message) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retriable_follows_the_wire_code_and_transport() {
        let not_leader =
            ClientError::from_code(ErrorCode::NotLeaderOrFollower as u16, None).expect("an error");
        assert!(not_leader.is_retriable());
        assert!(not_leader.needs_metadata_refresh());
        let bad_name = ClientError::from_code(ErrorCode::InvalidTopicName as u16, None).unwrap();
        assert!(!bad_name.is_retriable());
        assert!(ClientError::from_code(0, Some("x".into())).is_none());
        let io = ClientError::io(
            "h:1",
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        );
        assert!(io.is_retriable());
        assert!(io.needs_metadata_refresh());
        assert!(!ClientError::InvalidArgument("x".into()).is_retriable());
        let timeout = ClientError::Timeout {
            what: "x",
            timeout_ms: 1,
        };
        assert!(timeout.is_retriable());
        assert!(
            timeout.needs_metadata_refresh(),
            "a paused leader answers nothing"
        );
    }

    #[test]
    fn broker_error_display_prefers_the_broker_message() {
        let e = ClientError::from_code(
            ErrorCode::TopicAlreadyExists as u16,
            Some("topic orders exists".into()),
        )
        .unwrap();
        assert_eq!(e.to_string(), "TopicAlreadyExists: topic orders exists");
        let e = ClientError::from_code(ErrorCode::TopicAlreadyExists as u16, Some(String::new()))
            .unwrap();
        assert_eq!(e.to_string(), "TopicAlreadyExists: topic already exists");
        assert_eq!(e.code(), Some(ErrorCode::TopicAlreadyExists));
    }
}
