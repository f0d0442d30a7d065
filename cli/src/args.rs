//! Command-line arguments of `borges` (clap derive). Every command has examples in its help.
//! Kafka's tools are the model: their flag names are accepted beside ours (`--topic` beside
//! the positional topic, `--bootstrap-server`, `--property print.key=true`, ...).

use borges_broker::cli::BrokerArgs;
use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

const EXAMPLES: &str = "Examples:
  borges broker
  borges topic create orders --partitions 4
  printf 'user-1:created order 100\\n' | borges produce orders --key-separator :
  borges consume orders --from-beginning --max-messages 6 --print-partition --print-offset \\
      --print-key

The bootstrap address comes from --bootstrap (or --bootstrap-server), else BORGES_BOOTSTRAP,
else 127.0.0.1:9292. Warnings go to standard error (-v for more, -q for none); exit status 0 on
success, 1 on failure, 2 for a usage error.";

/// The `borges` command.
#[derive(Debug, Parser)]
#[command(
    name = "borges",
    version,
    about = "Borges: a thread-per-core streaming log broker, and its tools.",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// Broker to contact first (host:port[,host:port...]).
    #[arg(
        long,
        global = true,
        env = "BORGES_BOOTSTRAP",
        default_value = "127.0.0.1:9292",
        value_name = "HOST:PORT",
        visible_alias = "bootstrap-server"
    )]
    pub bootstrap: String,
    /// TLS: the CA certificates (PEM) to verify brokers with; connects with TLS. For
    /// `borges broker`: the CAs it verifies other brokers with (`tls.ca_file`).
    #[arg(long, global = true, env = "BORGES_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// TLS: this side's certificate chain (PEM): a client certificate for brokers that ask for
    /// one (mTLS); for `borges broker`, the listeners' certificate (`tls.cert_file`).
    #[arg(
        long,
        global = true,
        env = "BORGES_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS: the private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "BORGES_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,
    /// SASL: authenticate every connection with this mechanism (SCRAM-SHA-256 or
    /// SCRAM-SHA-512); needs --sasl-username and --sasl-password-file.
    #[arg(
        long,
        global = true,
        env = "BORGES_SASL_MECHANISM",
        value_name = "MECHANISM",
        requires_all = ["sasl_username", "sasl_password_file"]
    )]
    pub sasl_mechanism: Option<String>,
    /// SASL: the username.
    #[arg(long, global = true, env = "BORGES_SASL_USERNAME", value_name = "NAME")]
    pub sasl_username: Option<String>,
    /// SASL: a file whose first line is the password.
    #[arg(
        long,
        global = true,
        env = "BORGES_SASL_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub sasl_password_file: Option<std::path::PathBuf>,
    /// More log output on standard error: -v info, -vv debug, -vvv trace (RUST_LOG overrides).
    /// (`--verbose` is kept for `group describe --members --verbose`, as in Kafka.)
    #[arg(short = 'v', global = true, action = ArgAction::Count)]
    pub log_verbosity: u8,
    /// No warnings and no progress line on standard error (errors are still printed).
    #[arg(short, long, global = true, conflicts_with = "log_verbosity")]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a broker (embedded defaults: data in ./borges-data, listening on 127.0.0.1:9292).
    Broker(BrokerArgs),
    /// Create, describe, list, delete and alter topics; show their offsets.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Send one record per line of standard input.
    Produce(ProduceArgs),
    /// Print records, one per line.
    Consume(ConsumeArgs),
    /// Consumer groups: list, describe, reset offsets, delete.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Prepare data directories for a cluster (as kafka-storage.sh).
    #[command(subcommand)]
    Storage(crate::cluster_cmd::StorageCommand),
    /// The controller quorum and the brokers (as kafka-metadata-quorum.sh).
    #[command(subcommand)]
    Cluster(crate::cluster_cmd::ClusterCommand),
    /// SASL/SCRAM users of a broker: create, delete, list (its credentials file).
    #[command(subcommand)]
    User(crate::user::UserCommand),
    /// ACLs of a broker: add, remove, list (as kafka-acls.sh).
    #[command(subcommand)]
    Acl(crate::acl::AclCommand),
}

/// Output format of describe and list commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// Kafka's tools' text output.
    #[default]
    Text,
    /// One JSON document (as `rpk ... --format json`).
    Json,
}

/// `--format text|json`.
#[derive(Debug, Clone, Copy, Args)]
pub struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// A topic named positionally or with `--topic` (as Kafka's tools name it), exactly once.
#[derive(Debug, Clone, Args)]
#[group(id = "topic_name", required = true, multiple = false)]
pub struct TopicName {
    /// Topic name.
    #[arg(value_name = "TOPIC")]
    pub topic: Option<String>,
    /// Topic name (as Kafka's tools take it).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topic_flag: Option<String>,
}

impl TopicName {
    /// The name, from whichever form was given.
    pub fn name(&self) -> &str {
        self.topic
            .as_deref()
            .or(self.topic_flag.as_deref())
            .unwrap_or_default()
    }
}

/// An optional topic, positional or `--topic`.
#[derive(Debug, Clone, Args)]
#[group(id = "maybe_topic", multiple = false)]
pub struct MaybeTopicName {
    /// Topic name; every topic when omitted.
    #[arg(value_name = "TOPIC")]
    pub topic: Option<String>,
    /// Topic name (as Kafka's tools take it).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topic_flag: Option<String>,
}

impl MaybeTopicName {
    /// The name, if one was given.
    pub fn name(&self) -> Option<&str> {
        self.topic.as_deref().or(self.topic_flag.as_deref())
    }
}

/// `borges topic ...`
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges topic create orders --partitions 4\n",
            "  borges topic create --topic profiles --config cleanup.policy=compact ",
            "--if-not-exists",
        )
    )]
    Create {
        #[command(flatten)]
        name: TopicName,
        /// Partition count [default: the broker's num.partitions].
        #[arg(long, value_name = "N")]
        partitions: Option<i32>,
        /// Replicas per partition [default: the broker's default].
        #[arg(long, value_name = "N")]
        replication_factor: Option<i16>,
        /// A topic config; repeat for more.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Succeed without a change when the topic exists already.
        #[arg(long)]
        if_not_exists: bool,
    },
    /// Describe a topic (or every topic): id, partitions, leaders, replicas, ISR, configs.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges topic describe orders\n",
            "  borges topic describe --topic orders --all-configs\n",
            "  borges topic describe --format json\n",
            "\n",
            "Output (tab-separated, as kafka-topics.sh --describe):\n",
            "  Topic: orders<TAB>TopicId: ...<TAB>PartitionCount: 4<TAB>ReplicationFactor: ",
            "1<TAB>Configs: \n",
            "  <TAB>Topic: orders<TAB>Partition: 0<TAB>Leader: 0<TAB>Replicas: 0<TAB>Isr: 0\n",
            "With --all-configs, every config with its source, as kafka-configs.sh --describe ",
            "--all.",
        )
    )]
    Describe {
        #[command(flatten)]
        name: MaybeTopicName,
        /// Print every config of the topic with its source instead of the partitions.
        #[arg(long)]
        all_configs: bool,
        /// Leave out internal topics when describing every topic.
        #[arg(long)]
        exclude_internal: bool,
        #[command(flatten)]
        format: FormatArg,
    },
    /// List topic names, one per line.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges topic list\n",
            "  borges topic list --exclude-internal --format json",
        )
    )]
    List {
        /// Leave out internal topics (__consumer_offsets).
        #[arg(long)]
        exclude_internal: bool,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Delete a topic and all its data.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges topic delete orders\n",
            "  borges topic delete --topic orders --if-exists",
        )
    )]
    Delete {
        #[command(flatten)]
        name: TopicName,
        /// Succeed without a change when the topic does not exist.
        #[arg(long)]
        if_exists: bool,
    },
    /// Change topic configs, or add partitions.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges topic alter orders --config retention.ms=86400000\n",
            "  borges topic alter orders --delete-config retention.ms\n",
            "  borges topic alter orders --partitions 8",
        )
    )]
    Alter {
        #[command(flatten)]
        name: TopicName,
        /// Set a config; repeat for more.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
        /// Remove the topic's own value of a config (back to the default); repeat for more.
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
        /// Grow the topic to N partitions (keys may map to other partitions afterwards).
        #[arg(long, value_name = "N")]
        partitions: Option<i32>,
        /// Succeed without a change when the topic does not exist.
        #[arg(long)]
        if_exists: bool,
    },
    /// Log start offset, high watermark and size of every partition (as kafka-get-offsets.sh).
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges topic offsets orders\n",
            "  borges topic offsets orders --time earliest\n",
            "  borges topic offsets orders --time 2026-11-30T05:00:00Z --partitions 0,1\n",
            "\n",
            "Without --time: a table PARTITION LOG-START-OFFSET HIGH-WATERMARK SIZE-BYTES.\n",
            "With --time: TOPIC:PARTITION:OFFSET lines, as kafka-get-offsets.sh prints them\n",
            "(-1 latest, -2 earliest, -3 the record with the largest timestamp, else a time).",
        )
    )]
    Offsets {
        #[command(flatten)]
        name: TopicName,
        /// earliest (-2), latest (-1), max-timestamp (-3), ms since the epoch, or RFC 3339.
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        time: Option<String>,
        /// Only these partitions (comma-separated).
        #[arg(long, value_name = "P,P", value_delimiter = ',')]
        partitions: Vec<i32>,
        #[command(flatten)]
        format: FormatArg,
    },
}

/// `borges produce ...`
#[derive(Debug, Args)]
#[command(
    after_help = concat!(
        "Examples:\n",
        "  printf 'user-1:created order 100\\n",
        "user-2:created order 101\\n",
        "' | borges produce orders --key-separator :\n",
        "  borges produce --topic logs --acks 0 --header source=app < app.log\n",
        "  borges produce orders --property parse.key=true --property key.separator=:\n",
        "\n",
        "Exits 0 only once every record is acknowledged; otherwise prints why and exits 1.\n",
        "A progress line is shown on a terminal (not with -q, never when standard error is ",
        "redirected).",
    )
)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub name: TopicName,
    /// Each line is KEY<SEP>VALUE, split at the first SEP; lines without SEP are an error.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// Acknowledgements to wait for: 0, 1 or all.
    #[arg(
        long,
        default_value = "all",
        value_parser = ["0", "1", "all", "-1"],
        allow_hyphen_values = true
    )]
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
    /// Give up on a record this long after it was read (retries included).
    #[arg(long, default_value_t = 120_000, value_name = "MS")]
    pub delivery_timeout_ms: u64,
    /// How long one request may wait for the broker's answer.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub request_timeout_ms: u64,
    /// A header on every record; repeat for more.
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub headers: Vec<(String, String)>,
    /// A value equal to STR is sent as null: a tombstone on a compacted topic (Kafka's
    /// `null.marker`).
    #[arg(long, value_name = "STR")]
    pub null_marker: Option<String>,
    /// kafka-console-producer properties: parse.key=true, key.separator=SEP, null.marker=STR.
    #[arg(long = "property", value_name = "NAME=VALUE", value_parser = parse_key_value)]
    pub properties: Vec<(String, String)>,
}

/// `borges consume ...`
#[derive(Debug, Args)]
#[command(
    after_help = concat!(
        "Examples:\n",
        "  borges consume orders --from-beginning --max-messages 6 --print-partition ",
        "--print-offset --print-key\n",
        "  borges consume --topic orders --partition 3 --offset 1 --timeout-ms 2000\n",
        "  borges consume orders --group audit --property print.key=true --property ",
        "key.separator=,\n",
        "\n",
        "Output: one line per record, with only the fields asked for, in this order, separated ",
        "by\n",
        "--key-separator (a tab by default):\n",
        "  CreateTime:TS  Partition:P  Offset:O  HEADERS  KEY  VALUE\n",
        "Headers print as k1:v1,k2:v2 (NO_HEADERS when none); null keys and values as ",
        "--null-literal.\n",
        "Console-consumer properties: print.timestamp, print.partition, print.offset, ",
        "print.headers,\n",
        "print.key, print.value, key.separator, headers.separator, null.literal.",
    )
)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub name: TopicName,
    /// Read as a member of this consumer group: the group assigns the partitions, reading
    /// starts from its committed offsets, and the positions are committed.
    #[arg(long, value_name = "G", conflicts_with_all = ["partition", "offset"])]
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
    /// Print the headers (`k1:v1,k2:v2`, `NO_HEADERS` when there are none).
    #[arg(long)]
    pub print_headers: bool,
    /// Do not print the value.
    #[arg(long)]
    pub no_value: bool,
    /// Separator between the printed fields [default: a tab].
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// What a null key, value or header value prints as [default: null].
    #[arg(long, value_name = "TEXT")]
    pub null_literal: Option<String>,
    /// kafka-console-consumer properties, e.g. print.key=true; repeat for more.
    #[arg(long = "property", value_name = "NAME=VALUE", value_parser = parse_key_value)]
    pub properties: Vec<(String, String)>,
}

/// A group named positionally or with `--group`, or `--all-groups`.
#[derive(Debug, Clone, Args)]
#[group(id = "groups", required = true, multiple = false)]
pub struct GroupSelection {
    /// Group id.
    #[arg(value_name = "GROUP")]
    pub group: Option<String>,
    /// Group id (as kafka-consumer-groups.sh takes it).
    #[arg(long = "group", value_name = "GROUP")]
    pub group_flag: Option<String>,
    /// Every group.
    #[arg(long)]
    pub all_groups: bool,
}

impl GroupSelection {
    /// The one group named, `None` with `--all-groups`.
    pub fn name(&self) -> Option<&str> {
        self.group.as_deref().or(self.group_flag.as_deref())
    }
}

/// `borges group ...`
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List consumer groups, one id per line.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges group list\n",
            "  borges group list --state\n",
            "  borges group list --format json",
        )
    )]
    List {
        /// Print GROUP and STATE columns (as kafka-consumer-groups.sh --list --state).
        #[arg(long)]
        state: bool,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Show a group's committed offsets, log-end offsets, lag and owners per partition.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges group describe audit-svc\n",
            "  borges group describe --group audit-svc --members --verbose\n",
            "  borges group describe --all-groups --state --format json\n",
            "\n",
            "Output (columns aligned as kafka-consumer-groups.sh --describe):\n",
            "  GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST ",
            "CLIENT-ID\n",
            "--members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS (--verbose: and ASSIGNMENT)\n",
            "--state: GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS",
        )
    )]
    #[command(group(clap::ArgGroup::new("view").multiple(false)))]
    Describe {
        #[command(flatten)]
        groups: GroupSelection,
        /// One line per member instead of one per partition.
        #[arg(long, group = "view")]
        members: bool,
        /// The group's state, coordinator and member count.
        #[arg(long, group = "view")]
        state: bool,
        /// With --members: each member's assignment too.
        #[arg(long, requires = "members")]
        verbose: bool,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Move a group's committed offsets (refused while the group has active members).
    #[command(group(clap::ArgGroup::new("target").required(true).multiple(false)))]
    #[command(group(clap::ArgGroup::new("scope").required(true).multiple(false)))]
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges group reset-offsets audit-svc --topic orders --to-earliest --execute\n",
            "  borges group reset-offsets audit-svc --topic orders:0,1 --to-offset 5 --execute\n",
            "  borges group reset-offsets audit-svc --all-topics --by-duration PT1H --dry-run\n",
            "  borges group reset-offsets --group audit-svc --topic orders --shift-by -10 ",
            "--execute\n",
            "\n",
            "Without --execute nothing changes (a dry run prints the new offsets).",
        )
    )]
    ResetOffsets {
        #[command(flatten)]
        groups: GroupSelection,
        /// TOPIC or TOPIC:P,P (only these partitions); repeat for more.
        #[arg(
            long = "topic",
            value_name = "TOPIC[:P,P]",
            group = "scope",
            value_parser = parse_topic_partitions
        )]
        topics: Vec<(String, Vec<i32>)>,
        /// Every topic the group has committed offsets for.
        #[arg(long, group = "scope")]
        all_topics: bool,
        /// To the log start.
        #[arg(long, group = "target")]
        to_earliest: bool,
        /// To the log end.
        #[arg(long, group = "target")]
        to_latest: bool,
        /// To the committed offsets (the log end where there is none).
        #[arg(long, group = "target")]
        to_current: bool,
        /// To this offset (clamped to the log's range).
        #[arg(long, group = "target", value_name = "N")]
        to_offset: Option<i64>,
        /// To the first record at or after this time (RFC 3339, e.g. 2026-11-30T05:00:00Z).
        #[arg(long, group = "target", value_name = "RFC3339", value_parser = parse_datetime)]
        to_datetime: Option<i64>,
        /// To the first record at or after this long ago (ISO 8601: PT1H, P1DT12H, PT90S).
        #[arg(
            long,
            group = "target",
            value_name = "DURATION",
            value_parser = parse_iso_duration_ms
        )]
        by_duration: Option<i64>,
        /// Move the committed offsets by N (negative: back), clamped to the log's range.
        #[arg(long, group = "target", value_name = "N", allow_hyphen_values = true)]
        shift_by: Option<i64>,
        /// Only print the new offsets (the default).
        #[arg(long, conflicts_with = "execute")]
        dry_run: bool,
        /// Commit the new offsets.
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Delete a group without active members, and its committed offsets.
    #[command(
        after_help = concat!(
            "Examples:\n",
            "  borges group delete audit-svc\n",
            "  borges group delete --all-groups",
        )
    )]
    Delete {
        #[command(flatten)]
        groups: GroupSelection,
    },
}

/// Parses `KEY=VALUE`.
pub fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// Parses `TOPIC` or `TOPIC:P,P,...`.
pub fn parse_topic_partitions(text: &str) -> Result<(String, Vec<i32>), String> {
    let (topic, partitions) = match text.split_once(':') {
        Some((topic, list)) => {
            let partitions = list
                .split(',')
                .map(|p| p.trim().parse::<i32>().ok().filter(|p| *p >= 0))
                .collect::<Option<Vec<i32>>>()
                .filter(|ps| !ps.is_empty())
                .ok_or_else(|| format!("`{list}` is not a list of partitions like 0,1"))?;
            (topic, partitions)
        }
        None => (text, Vec::new()),
    };
    if topic.is_empty() {
        return Err(format!("`{text}` names no topic"));
    }
    Ok((topic.to_string(), partitions))
}

/// Parses an RFC 3339 time into ms since the epoch.
pub fn parse_datetime(text: &str) -> Result<i64, String> {
    crate::format::parse_rfc3339_ms(text)
        .ok_or_else(|| format!("`{text}` is not an RFC 3339 time like 2026-11-30T05:00:00Z"))
}

/// Parses an ISO 8601 duration (`PnDTnHnMnS`, as kafka-consumer-groups.sh --by-duration) into
/// milliseconds.
pub fn parse_iso_duration_ms(text: &str) -> Result<i64, String> {
    let bad = || format!("`{text}` is not an ISO 8601 duration like PT1H, P1DT12H or PT90S");
    let rest = text
        .strip_prefix('P')
        .or_else(|| text.strip_prefix('p'))
        .ok_or_else(bad)?;
    let (date, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return Err(bad()),
        None => (rest, None),
    };
    let mut ms: i64 = 0;
    let mut any = false;
    for (part, units) in [
        (date, &[('D', 86_400_000.0)][..]),
        (
            time.unwrap_or(""),
            &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)][..],
        ),
    ] {
        let mut number = String::new();
        let mut next_unit = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let upper = c.to_ascii_uppercase();
            let i = units[next_unit..]
                .iter()
                .position(|(u, _)| *u == upper)
                .ok_or_else(bad)?;
            let value: f64 = number.parse().map_err(|_| bad())?;
            ms = ms.saturating_add((value * units[next_unit + i].1) as i64);
            next_unit += i + 1;
            number.clear();
            any = true;
        }
        if !number.is_empty() {
            return Err(bad());
        }
    }
    if !any {
        return Err(bad());
    }
    Ok(ms)
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
                if_not_exists,
            }) => {
                assert_eq!(name.name(), "orders");
                assert_eq!(partitions, Some(4));
                assert_eq!(replication_factor, None);
                assert!(!if_not_exists);
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
    fn topics_are_named_positionally_or_with_topic_but_once() {
        for args in [
            &["produce", "t"][..],
            &["produce", "--topic", "t"],
            &["consume", "--topic", "t"],
        ] {
            let cli = parse(args).unwrap();
            let name = match &cli.command {
                Command::Produce(a) => a.name.name().to_string(),
                Command::Consume(a) => a.name.name().to_string(),
                _ => unreachable!(),
            };
            assert_eq!(name, "t", "{args:?}");
        }
        assert!(parse(&["produce"]).is_err());
        assert!(parse(&["produce", "a", "--topic", "b"]).is_err());
        assert!(parse(&["topic", "delete", "--topic", "t", "--if-exists"]).is_ok());
    }

    #[test]
    fn bootstrap_flag_works_after_the_subcommand_and_as_bootstrap_server() {
        let cli = parse(&["topic", "list", "--bootstrap", "h:2"]).unwrap();
        assert_eq!(cli.bootstrap, "h:2");
        let cli = parse(&["topic", "list", "--bootstrap-server", "h:3"]).unwrap();
        assert_eq!(cli.bootstrap, "h:3");
        let cli = parse(&["-vv", "topic", "list"]).unwrap();
        assert_eq!(cli.log_verbosity, 2);
        let cli = parse(&["group", "describe", "g", "--members", "--verbose", "-v"]).unwrap();
        assert_eq!(cli.log_verbosity, 1);
        assert!(parse(&["-q", "-v", "topic", "list"]).is_err());
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
        assert!(parse(&["produce", "t", "--acks", "-1"]).is_ok());
        assert!(parse(&["produce", "t", "--acks", "all", "--key-separator", ":"]).is_ok());
        assert!(parse(&["produce", "t", "--header", "novalue"]).is_err());
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
    fn group_reset_needs_one_target_and_one_scope() {
        let reset = |extra: &[&str]| {
            let mut args = vec!["group", "reset-offsets", "g"];
            args.extend_from_slice(extra);
            parse(&args)
        };
        assert!(reset(&["--topic", "t", "--to-earliest", "--to-latest"]).is_err());
        assert!(reset(&["--topic", "t"]).is_err());
        assert!(reset(&["--to-earliest"]).is_err(), "no scope");
        assert!(reset(&["--topic", "t", "--all-topics", "--to-earliest"]).is_err());
        assert!(reset(&["--topic", "t", "--shift-by", "-3", "--execute"]).is_ok());
        assert!(reset(&["--topic", "t", "--to-latest", "--execute", "--dry-run"]).is_err());
        assert!(reset(&["--topic", "t", "--to-datetime", "soon"]).is_err());
        assert!(reset(&["--all-topics", "--by-duration", "PT1H"]).is_ok());
        assert!(reset(&["--all-topics", "--by-duration", "1h"]).is_err());
        assert!(parse(&["consume", "t", "--group", "g", "--partition", "1"]).is_err());
        let cli = reset(&["--topic", "a:0,2", "--topic", "b", "--to-current"]).unwrap();
        let Command::Group(GroupCommand::ResetOffsets { topics, .. }) = cli.command else {
            panic!()
        };
        assert_eq!(
            topics,
            vec![("a".to_string(), vec![0, 2]), ("b".to_string(), vec![])]
        );
        assert!(parse(&[
            "group",
            "reset-offsets",
            "--all-groups",
            "--all-topics",
            "--to-latest"
        ])
        .is_ok());
        assert!(
            parse(&["group", "describe"]).is_err(),
            "a group or --all-groups"
        );
        assert!(parse(&["group", "describe", "g", "--members", "--state"]).is_err());
        assert!(parse(&["group", "describe", "g", "--verbose"]).is_err());
    }

    #[test]
    fn topic_partition_lists_parse() {
        assert_eq!(
            parse_topic_partitions("t:0, 1").unwrap(),
            ("t".to_string(), vec![0, 1])
        );
        assert_eq!(
            parse_topic_partitions("t").unwrap(),
            ("t".to_string(), vec![])
        );
        assert!(parse_topic_partitions("t:").is_err());
        assert!(parse_topic_partitions("t:x").is_err());
        assert!(parse_topic_partitions("t:-1").is_err());
        assert!(parse_topic_partitions(":0").is_err());
    }

    #[test]
    fn iso_durations_parse_to_milliseconds() {
        assert_eq!(parse_iso_duration_ms("PT1H"), Ok(3_600_000));
        assert_eq!(parse_iso_duration_ms("P1DT12H"), Ok(129_600_000));
        assert_eq!(parse_iso_duration_ms("PT90S"), Ok(90_000));
        assert_eq!(parse_iso_duration_ms("PT1M30.5S"), Ok(90_500));
        assert_eq!(parse_iso_duration_ms("P2D"), Ok(172_800_000));
        for bad in ["", "P", "PT", "1H", "PT1X", "PT1S1H", "P1H", "PT5"] {
            assert!(parse_iso_duration_ms(bad).is_err(), "{bad}");
        }
    }
}
