//! `borges-fault-driver`: the workload side of `scripts/fault-suite.sh`.
//!
//! ```text
//! borges-fault-driver setup   --bootstrap B --topic T --partitions 4 [--min-insync-replicas 2]
//! borges-fault-driver run     --bootstrap B --topic T --partitions 4 --history H \
//!                             --duration-s N --seed S
//! borges-fault-driver read    --bootstrap B --topic T --partitions 4 --history H2
//! borges-fault-driver leader  --bootstrap B --topic T --partition 0
//! borges-fault-driver probe   --bootstrap B --data-dir 1=DIR --data-dir 2=DIR ...
//! ```
//!
//! `run` and `read` write separate histories (disjoint process ids) that `borges-checker
//! check` merges with the fault injector's. Exit codes: 0 done, 1 failed, 3 (`probe` only)
//! followers are not fed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use borges_checker::Recorder;
use borges_faults::topology::{self, Replication, TopicSpec};
use borges_faults::workload::{self, WorkloadOptions};
use borges_faults::{client_config, readback, READBACK_ID_BASE, WORKLOAD_ID_BASE};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "borges-fault-driver",
    about = "Workload driver of the Borges fault suite"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Target {
    /// Brokers to contact first (host:port[,host:port...]).
    #[arg(long)]
    bootstrap: String,
    /// The workload topic.
    #[arg(long, default_value = "jepsen")]
    topic: String,
    /// Request timeout of every client.
    #[arg(long, default_value_t = 3_000)]
    request_timeout_ms: u64,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    target: Target,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long)]
    history: PathBuf,
    #[arg(long)]
    duration_s: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 2)]
    producers: usize,
    #[arg(long, default_value_t = 100)]
    rate_per_producer_per_s: u32,
    #[arg(long, default_value_t = 8)]
    in_flight_per_partition_max: usize,
    #[arg(long, default_value_t = 30_000)]
    delivery_timeout_ms: u64,
    #[arg(long, default_value_t = 2)]
    assign_consumers: usize,
    #[arg(long, default_value_t = 2)]
    group_consumers: usize,
    #[arg(long, default_value_t = 30)]
    consumer_lifetime_s: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Creates the workload topic and waits for its leaders.
    Setup {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[arg(long, default_value_t = 3)]
        replication_factor: i16,
        #[arg(long, default_value_t = 2)]
        min_insync_replicas: u32,
        #[arg(long, default_value = "fsync")]
        durability: String,
        #[arg(long, default_value_t = 60)]
        wait_s: u64,
    },
    /// Runs producers and consumers for --duration-s, recording into --history.
    Run(RunArgs),
    /// Waits for a full ISR, then reads every partition back into --history.
    Read {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[arg(long)]
        history: PathBuf,
        /// How long to wait for a full ISR before reading anyway.
        #[arg(long, default_value_t = 30)]
        isr_wait_s: u64,
        /// How long one partition's read may take.
        #[arg(long, default_value_t = 60)]
        read_wait_s: u64,
    },
    /// Prints the leader of a partition (-1: none within --wait-s).
    Leader {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 0)]
        partition: i32,
        #[arg(long, default_value_t = 10)]
        wait_s: u64,
    },
    /// Whether followers are fed: one acks=all write to a probe topic, then every broker's
    /// data directory must hold it. Exit 0 yes, 3 no.
    Probe {
        #[command(flatten)]
        target: Target,
        /// NODE=DIR: broker NODE's data directory.
        #[arg(long = "data-dir", required = true)]
        data_dirs: Vec<String>,
        #[arg(long, default_value = "fault-probe")]
        probe_topic: String,
        #[arg(long, default_value_t = 10)]
        wait_s: u64,
    },
}

/// The client's log on standard error (the suite keeps it in `driver.log`): warnings by
/// default (a produce retried, a broker passed over), `FAULT_DRIVER_LOG` for more, e.g.
/// `borges_client=debug` to follow every retry and metadata refresh of a failover.
fn init_log() {
    let filter = std::env::var("FAULT_DRIVER_LOG").unwrap_or_else(|_| "warn".to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

fn main() -> ExitCode {
    init_log();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("borges-fault-driver: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(Cli::parse().command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("borges-fault-driver: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Setup {
            target,
            partitions,
            replication_factor,
            min_insync_replicas,
            durability,
            wait_s,
        } => {
            let spec = TopicSpec {
                name: target.topic.clone(),
                partitions,
                replication_factor,
                min_insync_replicas,
                durability,
            };
            let config = client_config(&target.bootstrap, target.request_timeout_ms);
            topology::create_topic(&config, &spec, Duration::from_secs(wait_s)).await?;
            println!("topic {} ready ({partitions} partitions)", spec.name);
        }
        Command::Run(args) => run_workload(args).await?,
        Command::Read {
            target,
            partitions,
            history,
            isr_wait_s,
            read_wait_s,
        } => return read(target, partitions, history, isr_wait_s, read_wait_s).await,
        Command::Leader {
            target,
            partition,
            wait_s,
        } => {
            let config = client_config(&target.bootstrap, target.request_timeout_ms);
            let wait = Duration::from_secs(wait_s);
            println!(
                "{}",
                topology::leader(&config, &target.topic, partition, wait).await
            );
        }
        Command::Probe {
            target,
            data_dirs,
            probe_topic,
            wait_s,
        } => return probe(target, data_dirs, probe_topic, wait_s).await,
    }
    Ok(ExitCode::SUCCESS)
}

async fn run_workload(args: RunArgs) -> Result<()> {
    let options = WorkloadOptions {
        topic: args.target.topic.clone(),
        partitions: args.partitions,
        duration: Duration::from_secs(args.duration_s),
        producers: args.producers,
        rate_per_producer_per_s: args.rate_per_producer_per_s,
        in_flight_per_partition_max: args.in_flight_per_partition_max,
        delivery_timeout_ms: args.delivery_timeout_ms,
        assign_consumers: args.assign_consumers,
        group_consumers: args.group_consumers,
        consumer_lifetime_s: args.consumer_lifetime_s,
        seed: args.seed,
    };
    let recorder = Recorder::create(&args.history, WORKLOAD_ID_BASE)
        .with_context(|| format!("creating {}", args.history.display()))?;
    let config = client_config(&args.target.bootstrap, args.target.request_timeout_ms);
    let tally = workload::run(config, options, recorder).await;
    println!("workload {}", tally.line());
    Ok(())
}

async fn read(
    target: Target,
    partitions: i32,
    history: PathBuf,
    isr_wait_s: u64,
    read_wait_s: u64,
) -> Result<ExitCode> {
    let config = client_config(&target.bootstrap, target.request_timeout_ms);
    let wait = Duration::from_secs(isr_wait_s);
    let short = topology::wait_for_full_isr(&config, &target.topic, wait).await;
    for p in &short {
        println!(
            "read: partition {} not fully in sync after {isr_wait_s} s: leader {} replicas {:?} \
             isr {:?}",
            p.partition, p.leader, p.replicas, p.isr
        );
    }
    let recorder = Recorder::create(&history, READBACK_ID_BASE)
        .with_context(|| format!("creating {}", history.display()))?;
    let wait = Duration::from_secs(read_wait_s);
    let reads = readback::read_back(&config, &target.topic, partitions, &recorder, wait).await;
    let mut incomplete = 0;
    for r in &reads {
        let bounds = r
            .bounds
            .map_or("unknown".to_string(), |(s, hw)| format!("{s}..{hw}"));
        println!(
            "read: partition {} offsets {bounds} records {} {}",
            r.partition,
            r.records,
            if r.complete { "complete" } else { "INCOMPLETE" }
        );
        incomplete += usize::from(!r.complete);
    }
    if incomplete > 0 {
        bail!("{incomplete} partitions not read completely");
    }
    Ok(ExitCode::SUCCESS)
}

async fn probe(
    target: Target,
    data_dirs: Vec<String>,
    probe_topic: String,
    wait_s: u64,
) -> Result<ExitCode> {
    let mut dirs = Vec::new();
    for spec in &data_dirs {
        let Some((node, dir)) = spec.split_once('=') else {
            bail!("--data-dir {spec}: expected NODE=DIR");
        };
        let node: u64 = node
            .parse()
            .with_context(|| format!("--data-dir {spec}: NODE is not a number"))?;
        dirs.push((node, PathBuf::from(dir)));
    }
    let config = client_config(&target.bootstrap, target.request_timeout_ms);
    let wait = Duration::from_secs(wait_s);
    match topology::probe_replication(&config, &probe_topic, &dirs, wait).await? {
        Replication::Active => {
            println!("replication active: every replica holds the probe record");
            Ok(ExitCode::SUCCESS)
        }
        Replication::Inactive(why) => {
            println!("replication not active: {why}");
            Ok(ExitCode::from(3))
        }
    }
}
