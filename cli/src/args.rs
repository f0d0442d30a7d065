//! Command-line arguments of `borges` (clap derive). Every command has examples in its help.

use borges_broker::cli::BrokerArgs;
use clap::{Args, Parser, Subcommand};

const EXAMPLES: &str = "Examples:
  borges broker
  borges topic create orders --partitions 4
  printf 'user-1:created order 100\\n' | borges produce orders --key-separator :
  borges consume orders --from-beginning --max-messages 6 --print-partition --print-offset --print-key

The bootstrap address comes from --bootstrap, else BORGES_BOOTSTRAP, else 127.0.0.1:9292.";

/// The `borges` command.
#[derive(Debug, Parser)]
#[command(name = "borges", version, about = "Borges: a thread-per-core streaming log broker, and its tools.", after_help = EXAMPLES)]
pub struct Cli {
    /// Broker to contact first (host:port[,host:port...]).
    #[arg(
        long,
        global = true,
        env = "BORGES_BOOTSTRAP",
        default_value = "127.0.0.1:9292",
        value_name = "HOST:PORT"
    )]
    pub bootstrap: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a broker (embedded defaults: data in ./borges-data, listening on 127.0.0.1:9292).
    Broker(BrokerArgs),
    /// Create, describe, list, delete and alter topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Send one record per line of standard input.
    Produce(ProduceArgs),
    /// Print records, one per line.
    Consume(ConsumeArgs),
    /// Consumer groups: list, describe, reset offsets, delete.
    #[command(subcommand)]
    Group(GroupCommand),
}

/// `borges topic ...`
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    #[command(
        after_help = "Examples:\n  borges topic create orders --partitions 4\n  borges topic create profiles --config cleanup.policy=compact --config retention.ms=-1"
    )]
    Create {
        /// Topic name ([a-zA-Z0-9._-], at most 249 characters).
        name: String,
        /// Partition count [default: the broker's num.partitions].
        #[arg(long, value_name = "N")]
        partitions: Option<i32>,
        /// Replicas per partition [default: the broker's default].
        #[arg(long, value_name = "N")]
        replication_factor: Option<i16>,
        /// A topic config; repeat for more.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
    },
    /// Describe a topic (or every topic): id, partitions, leaders, replicas, ISR, configs.
    #[command(
        after_help = "Examples:\n  borges topic describe orders\n  borges topic describe\n\nOutput (tab-separated, as kafka-topics.sh --describe):\n  Topic: orders<TAB>TopicId: ...<TAB>PartitionCount: 4<TAB>ReplicationFactor: 1<TAB>Configs: \n  <TAB>Topic: orders<TAB>Partition: 0<TAB>Leader: 0<TAB>Replicas: 0<TAB>Isr: 0"
    )]
    Describe {
        /// Topic name; every topic when omitted.
        name: Option<String>,
    },
    /// List topic names, one per line.
    #[command(
        after_help = "Examples:\n  borges topic list\n  borges topic list --exclude-internal"
    )]
    List {
        /// Leave out internal topics (__consumer_offsets).
        #[arg(long)]
        exclude_internal: bool,
    },
    /// Delete a topic and all its data.
    #[command(after_help = "Examples:\n  borges topic delete orders")]
    Delete {
        /// Topic name.
        name: String,
    },
    /// Change topic configs.
    #[command(
        after_help = "Examples:\n  borges topic alter orders --config retention.ms=86400000\n  borges topic alter orders --delete-config retention.ms"
    )]
    Alter {
        /// Topic name.
        name: String,
        /// Set a config; repeat for more.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Remove the topic's own value of a config (back to the default); repeat for more.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
    },
}

/// `borges produce ...`
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  printf 'user-1:created order 100\\nuser-2:created order 101\\n' | borges produce orders --key-separator :\n  borges produce logs --acks 0 < app.log\n\nExits 0 only once every record is acknowledged; otherwise prints why and exits 1."
)]
pub struct ProduceArgs {
    /// Topic to send to.
    pub topic: String,
    /// Each line is KEY<SEP>VALUE, split at the first SEP; lines without SEP are an error.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// Acknowledgements to wait for: 0, 1 or all.
    #[arg(long, default_value = "all", value_parser = ["0", "1", "all", "-1"])]
    pub acks: String,
    /// Send every record to this partition (default: by key, or sticky without a key).
    #[arg(long, value_name = "P")]
    pub partition: Option<i32>,
    /// Compression codec.
    #[arg(long, default_value = "none", value_parser = ["none", "zstd"])]
    pub compression: String,
    /// How long a batch may wait for more records.
    #[arg(long, default_value_t = 5, value_name = "MS")]
    pub linger_ms: u64,
}

/// `borges consume ...`
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  borges consume orders --from-beginning --max-messages 6 --print-partition --print-offset --print-key\n  borges consume orders --partition 3 --offset 1 --timeout-ms 2000\n\nOutput: one line per record, tab-separated, with only the fields asked for, in this order:\n  CreateTime:TS<TAB>Partition:P<TAB>Offset:O<TAB>KEY<TAB>VALUE\nNull keys and values print as `null`."
)]
pub struct ConsumeArgs {
    /// Topic to read.
    pub topic: String,
    /// Read as a member of this consumer group: the group assigns the partitions, reading
    /// starts from its committed offsets, and what is printed is committed.
    #[arg(long, value_name = "G", conflicts_with = "partition")]
    pub group: Option<String>,
    /// With --group: the member is removed when it does not heartbeat for this long (the
    /// coordinator clamps it to its limits).
    #[arg(long, value_name = "MS", requires = "group", default_value_t = 45_000)]
    pub session_timeout_ms: u64,
    /// Start at the oldest record instead of the end.
    #[arg(long)]
    pub from_beginning: bool,
    /// Read only this partition.
    #[arg(long, value_name = "P")]
    pub partition: Option<i32>,
    /// Start offset in --partition: a number, `earliest` or `latest`.
    #[arg(long, value_name = "O", requires = "partition")]
    pub offset: Option<String>,
    /// Exit after this many records.
    #[arg(long, value_name = "N")]
    pub max_messages: Option<u64>,
    /// Exit after this long without a new record.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Print `Partition:P`.
    #[arg(long)]
    pub print_partition: bool,
    /// Print `Offset:O`.
    #[arg(long)]
    pub print_offset: bool,
    /// Print the key.
    #[arg(long)]
    pub print_key: bool,
    /// Print `CreateTime:TS`.
    #[arg(long)]
    pub print_timestamp: bool,
}

/// `borges group ...`
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List consumer groups, one id per line.
    #[command(after_help = "Examples:\n  borges group list")]
    List,
    /// Show a group's committed offsets, log-end offsets, lag and owners per partition.
    #[command(
        after_help = "Examples:\n  borges group describe audit-svc\n\nOutput (columns aligned as kafka-consumer-groups.sh --describe):\n  GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID"
    )]
    Describe {
        /// Group id.
        group: String,
    },
    /// Move a group's committed offsets of a topic (refused while the group has active members).
    #[command(group(clap::ArgGroup::new("target").required(true).multiple(false)))]
    #[command(
        after_help = "Examples:\n  borges group reset-offsets audit-svc --topic orders --to-earliest --execute\n  borges group reset-offsets audit-svc --topic orders --to-datetime 2026-11-30T05:00:00Z --dry-run\n  borges group reset-offsets audit-svc --topic orders --shift-by -10 --execute\n\nWithout --execute nothing changes (a dry run prints the new offsets)."
    )]
    ResetOffsets {
        /// Group id.
        group: String,
        /// Topic whose offsets move (every partition).
        #[arg(long)]
        topic: String,
        /// To the log start.
        #[arg(long, group = "target")]
        to_earliest: bool,
        /// To the log end.
        #[arg(long, group = "target")]
        to_latest: bool,
        /// To this offset (clamped to the log's range).
        #[arg(long, group = "target", value_name = "N")]
        to_offset: Option<i64>,
        /// To the first record at or after this time (RFC 3339, e.g. 2026-11-30T05:00:00Z).
        #[arg(long, group = "target", value_name = "RFC3339")]
        to_datetime: Option<String>,
        /// Move the committed offsets by N (negative: back), clamped to the log's range.
        #[arg(long, group = "target", value_name = "N", allow_hyphen_values = true)]
        shift_by: Option<i64>,
        /// Only print the new offsets (the default).
        #[arg(long, conflicts_with = "execute")]
        dry_run: bool,
        /// Commit the new offsets.
        #[arg(long)]
        execute: bool,
    },
    /// Delete a group without active members, and its committed offsets.
    #[command(after_help = "Examples:\n  borges group delete audit-svc")]
    Delete {
        /// Group id.
        group: String,
    },
}

/// Parses `KEY=VALUE`.
pub fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("borges").chain(args.iter().copied()))
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn topic_create_takes_partitions_and_repeated_configs() {
        let cli = parse(&[
            "--bootstrap",
            "h:1",
            "topic",
            "create",
            "orders",
            "--partitions",
            "4",
            "--config",
            "a=1",
            "--config",
            "b=x=y",
        ])
        .unwrap();
        assert_eq!(cli.bootstrap, "h:1");
        match cli.command {
            Command::Topic(TopicCommand::Create {
                name,
                partitions,
                replication_factor,
                configs,
            }) => {
                assert_eq!(name, "orders");
                assert_eq!(partitions, Some(4));
                assert_eq!(replication_factor, None);
                assert_eq!(
                    configs,
                    vec![("a".into(), "1".into()), ("b".into(), "x=y".into())]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["topic", "create", "t", "--config", "novalue"]).is_err());
    }

    #[test]
    fn bootstrap_flag_works_after_the_subcommand_too() {
        let cli = parse(&["topic", "list", "--bootstrap", "h:2"]).unwrap();
        assert_eq!(cli.bootstrap, "h:2");
    }

    #[test]
    fn consume_offset_requires_partition_and_acks_are_checked() {
        assert!(parse(&["consume", "t", "--offset", "3"]).is_err());
        let cli = parse(&[
            "consume",
            "t",
            "--partition",
            "1",
            "--offset",
            "3",
            "--print-key",
            "--max-messages",
            "2",
        ])
        .unwrap();
        let Command::Consume(args) = cli.command else {
            panic!()
        };
        assert_eq!(args.offset.as_deref(), Some("3"));
        assert!(args.print_key && !args.print_offset);
        assert!(parse(&["produce", "t", "--acks", "2"]).is_err());
        assert!(parse(&["produce", "t", "--acks", "all", "--key-separator", ":"]).is_ok());
    }

    #[test]
    fn broker_subcommand_takes_the_broker_arguments() {
        let cli = parse(&[
            "broker",
            "--data-dir",
            "/tmp/x",
            "--listen",
            "127.0.0.1:1",
            "--cores",
            "2",
        ])
        .unwrap();
        let Command::Broker(args) = cli.command else {
            panic!()
        };
        assert_eq!(args.cores, Some(2));
        assert_eq!(args.listen.as_deref(), Some("127.0.0.1:1"));
    }

    #[test]
    fn group_reset_needs_one_target() {
        assert!(parse(&[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--to-latest"
        ])
        .is_err());
        assert!(parse(&["group", "reset-offsets", "g", "--topic", "t"]).is_err());
        assert!(parse(&[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--shift-by",
            "-3",
            "--execute"
        ])
        .is_ok());
        assert!(parse(&[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-latest",
            "--execute",
            "--dry-run"
        ])
        .is_err());
        assert!(parse(&["consume", "t", "--group", "g", "--partition", "1"]).is_err());
        assert!(parse(&[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-offset",
            "5"
        ])
        .is_ok());
    }
}
