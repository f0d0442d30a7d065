//! `borges-loadgen`: the Borges benchmark suite's command line.
//!
//! ```text
//! borges-loadgen run --workload FILE --driver borges|kafka --bootstrap HOST:PORT
//!                    [--duration-s N] [--json OUT] [--broker-pid PID]
//! borges-loadgen report --out DIR [--notes FILE] RESULT.json...
//! borges-loadgen validate WORKLOAD...
//! ```

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use borges_loadgen::driver::borges::BorgesDriver;
use borges_loadgen::driver::kafka::KafkaDriver;
use borges_loadgen::driver::Driver;
use borges_loadgen::procstat;
use borges_loadgen::result::RunResult;
use borges_loadgen::runner::{self, RunOptions};
use borges_loadgen::workload::Workload;
use borges_loadgen::{clock, report};
use clap::{Parser, Subcommand, ValueEnum};

/// Most worker threads of the runtime that async clients run on, unless `--runtime-threads`
/// says: fewer when the process may use fewer CPUs (`taskset`). On one CPU a second worker only
/// adds thread switches: 12% less producer throughput per CPU-second (docs/benchmarks.md
/// section 17).
const RUNTIME_THREADS: usize = 2;
/// Most worker threads `--runtime-threads` accepts.
const RUNTIME_THREADS_MAX: i64 = 64;

#[derive(Parser)]
#[command(
    name = "borges-loadgen",
    version,
    about = "Benchmarks Borges against Apache Kafka"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one workload against an already running broker.
    Run(RunArgs),
    /// Writes a side-by-side markdown report with SVG charts from result files.
    Report {
        /// Output directory (report.md and the charts).
        #[arg(long)]
        out: PathBuf,
        /// Markdown put under the title (machine, cores, commands, durability settings).
        #[arg(long)]
        notes: Option<PathBuf>,
        /// Result files written by `run --json`.
        #[arg(required = true)]
        results: Vec<PathBuf>,
    },
    /// Measures the broker's own produce or fetch limit with pre-encoded requests.
    Blast(borges_loadgen::blast::BlastArgs),
    /// Checks workload files.
    Validate {
        /// Workload TOML files.
        #[arg(required = true)]
        workloads: Vec<PathBuf>,
    },
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum DriverKind {
    Borges,
    Kafka,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Workload TOML file.
    #[arg(long)]
    workload: PathBuf,
    /// System under test.
    #[arg(long, value_enum)]
    driver: DriverKind,
    /// Broker address, HOST:PORT.
    #[arg(long)]
    bootstrap: String,
    /// Measured duration in seconds (overrides the workload's; warm-up is capped at half).
    #[arg(long)]
    duration_s: Option<u64>,
    /// Write the full result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Broker process to sample for CPU and memory (default: the process listening on the
    /// bootstrap port, if visible).
    #[arg(long)]
    broker_pid: Option<u32>,
    /// Do not sample the broker process.
    #[arg(long)]
    no_broker_stats: bool,
    /// Topic name prefix (default: `<workload>-<driver>-<time>`).
    #[arg(long)]
    topic_prefix: Option<String>,
    /// Keep the topics after the run.
    #[arg(long)]
    keep_topics: bool,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
    /// Seed for keys and payloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads of the runtime the clients' network tasks run on (the producer and
    /// consumer loops have threads of their own) [default: 2, or 1 when the process may use
    /// only one CPU].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=RUNTIME_THREADS_MAX))]
    runtime_threads: Option<u16>,
    /// Borges driver: send every request to the broker's main listener instead of the core that
    /// owns the partition (measures the cross-core forwarding path).
    #[arg(long)]
    no_shard_aware: bool,
    /// Borges driver: connect with TLS, verifying brokers against these CAs (PEM).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Borges driver: client certificate (PEM) for mTLS, with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Borges driver: private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Borges driver: authenticate every connection with SASL/SCRAM (SCRAM-SHA-256 or
    /// SCRAM-SHA-512), as --sasl-username with the password in --sasl-password-file.
    #[arg(
        long,
        env = "BORGES_SASL_MECHANISM",
        value_name = "MECHANISM",
        requires_all = ["sasl_username", "sasl_password_file"]
    )]
    sasl_mechanism: Option<String>,
    /// Borges driver: the SASL username.
    #[arg(
        long,
        env = "BORGES_SASL_USERNAME",
        value_name = "NAME",
        requires = "sasl_mechanism"
    )]
    sasl_username: Option<String>,
    /// Borges driver: a file whose first line is the SASL password.
    #[arg(
        long,
        env = "BORGES_SASL_PASSWORD_FILE",
        value_name = "FILE",
        requires = "sasl_mechanism"
    )]
    sasl_password_file: Option<PathBuf>,
}

impl RunArgs {
    /// The Borges driver's SASL settings (the password file is read now); none without
    /// --sasl-mechanism.
    fn sasl(&self) -> Result<Option<borges_client::SaslConfig>> {
        let (Some(mechanism), Some(username), Some(file)) = (
            &self.sasl_mechanism,
            &self.sasl_username,
            &self.sasl_password_file,
        ) else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading --sasl-password-file {}", file.display()))?;
        let password = text.lines().next().unwrap_or("");
        Ok(Some(borges_client::SaslConfig::scram(
            mechanism, username, password,
        )?))
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Blast(args) => borges_loadgen::blast::run(args),
        Command::Report {
            out,
            notes,
            results,
        } => {
            let notes = match notes {
                Some(p) => std::fs::read_to_string(&p)
                    .with_context(|| format!("reading {}", p.display()))?,
                None => String::new(),
            };
            let results = results
                .iter()
                .map(|p| RunResult::read_json(p))
                .collect::<Result<Vec<_>, _>>()?;
            let path = report::write_report(results, &out, &notes)?;
            println!("{}", path.display());
            Ok(())
        }
        Command::Validate { workloads } => {
            for p in workloads {
                let w = Workload::from_file(&p)?;
                println!("{}: ok ({})", p.display(), w.name);
            }
            Ok(())
        }
    }
}

/// `--runtime-threads`, or [`RUNTIME_THREADS`] capped by the CPUs this process may run on.
fn runtime_threads(asked: Option<u16>) -> usize {
    asked.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(RUNTIME_THREADS))
    })
}

fn run(args: RunArgs) -> Result<()> {
    let mut workload = Workload::from_file(&args.workload)?;
    if let Some(d) = args.duration_s {
        workload = workload.with_duration_s(d);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(runtime_threads(args.runtime_threads))
        .thread_name("loadgen-rt")
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let driver: Box<dyn Driver> = match args.driver {
        DriverKind::Kafka => Box::new(KafkaDriver::new(&args.bootstrap, runtime.handle().clone())),
        DriverKind::Borges => Box::new(
            BorgesDriver::new(&args.bootstrap, runtime.handle().clone())?
                .shard_aware(!args.no_shard_aware)
                .tls(args.tls_ca.clone().map(|ca| borges_client::TlsConfig {
                    ca_file: ca,
                    cert_file: args.tls_cert.clone(),
                    key_file: args.tls_key.clone(),
                }))
                .sasl(args.sasl()?),
        ),
    };
    let broker_pid = if args.no_broker_stats {
        None
    } else {
        args.broker_pid.or_else(|| find_broker(&args.bootstrap))
    };
    if broker_pid.is_none() && !args.no_broker_stats && !args.quiet {
        eprintln!("note: broker process not found; no broker CPU/RSS (use --broker-pid)");
    }
    let opts = RunOptions {
        bootstrap: args.bootstrap.clone(),
        broker_pid,
        topic_prefix: args.topic_prefix.clone().unwrap_or_else(|| {
            format!(
                "{}-{}-{}",
                workload.name,
                driver.name(),
                clock::now_ns() / 1_000_000
            )
        }),
        keep_topics: args.keep_topics,
        progress: !args.quiet,
        seed: args.seed,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let result = runner::run(driver.as_ref(), &workload, &opts)?;
    drop(driver);
    if let Some(path) = &args.json {
        result.write_json(path)?;
    }
    print!("{}", result.human_table());
    println!();
    print!("{}", result.machine_lines());
    if result.summary.acked_records == 0 {
        bail!("no record was acknowledged");
    }
    Ok(())
}

/// The process listening on the bootstrap address's port.
fn find_broker(bootstrap: &str) -> Option<u32> {
    let first = bootstrap.split(',').next()?;
    let port: u16 = first.rsplit(':').next()?.parse().ok()?;
    procstat::find_listener_pid(port)
}
