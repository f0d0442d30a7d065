//! The Borges client SDK for tokio applications: [`Producer`], [`Consumer`] and [`Admin`].
//!
//! ```no_run
//! use borges_client::{Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, Offset,
//!     Producer, ProducerConfig, ProducerRecord, TopicPartition};
//! use std::time::Duration;
//!
//! # async fn example() -> borges_client::Result<()> {
//! let config = ClientConfig::new("127.0.0.1:9292");
//! Admin::new(config.clone()).await?.create_topics(vec![NewTopic::new("orders", 4)]).await?;
//!
//! let producer = Producer::new(config.clone(), ProducerConfig::default()).await?;
//! let ack = producer.send(ProducerRecord::new("orders").key("user-1").value("created")).await?;
//! let written = ack.await?;
//!
//! let mut consumer = Consumer::new(config, ConsumerConfig::default()).await?;
//! let tp = TopicPartition::new("orders", written.partition);
//! consumer.assign(vec![tp.clone()]).await?;
//! consumer.seek(&tp, Offset::Beginning).await?;
//! for record in consumer.poll(Duration::from_millis(500)).await? {
//!     println!("{} {:?}", record.offset, record.value);
//! }
//! # Ok(()) }
//! ```
//!
//! Every component is shard-aware: metadata names the core that owns each partition and that
//! core's own port, and requests for a partition go straight there (see `docs/client.md`).
//! Errors are one enum, [`ClientError`], whose [`ClientError::is_retriable`] tells transient
//! failures from permanent ones.

#![warn(missing_docs)]

mod admin;
mod client;
mod codec;
mod config;
mod connection;
mod consumer;
mod error;
mod group;
mod metadata;
mod producer;
mod retry;
mod sasl;
mod timer;
mod tls;
mod types;

pub use admin::{Admin, ScramDeletion, ScramUpsertion, UserScramCredentials};
pub use config::{
    Acks, ClientConfig, Compression, ConsumerConfig, OffsetReset, ProducerConfig, TlsConfig,
};
pub use consumer::{Consumer, RebalanceListener};
pub use error::{ClientError, Result};
pub use producer::{DeliveryFuture, Producer};
pub use sasl::SaslConfig;
pub use types::{
    AlterConfig, ConfigEntry, ConfigSource, ConsumerRecord, GroupCoordinator, GroupDescription,
    GroupListing, GroupState, ListedOffset, MemberDescription, NewTopic, Offset, OffsetSpec,
    PartitionInfo, ProducerRecord, RecordMetadata, TopicDescription, TopicId, TopicPartition,
    TopicResult,
};

/// The wire error codes ([`ClientError::Broker`] carries one).
pub use borges_protocol::acl;
pub use borges_protocol::scram::Mechanism as ScramMechanism;
pub use borges_protocol::ErrorCode;
