//! `borges broker`: command-line arguments and the entry point the `borges` binary calls.
//!
//! Precedence: embedded defaults < `--config` TOML file < environment (`BORGES_*`) < flags.

use std::path::PathBuf;

use clap::Args;

use crate::config::BrokerConfig;

/// Arguments of `borges broker`.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Examples:\n  borges broker\n  borges broker --data-dir /var/lib/borges --listen 0.0.0.0:9292 --cores 8\n  borges broker --config borges.toml\n  borges broker --tls-cert broker.pem --tls-key broker.key [--tls-client-ca clients-ca.pem]\n  borges broker --sasl-enabled-mechanisms SCRAM-SHA-256,SCRAM-SHA-512\n  borges broker --node-id 1 --data-dir n1 --listen 127.0.0.1:9292 --controller-listen 127.0.0.1:9393 --controller-voters 1@127.0.0.1:9393,2@127.0.0.1:9493,3@127.0.0.1:9593\n\nEvery setting, its default and its unit are listed in docs/operations.md."
)]
pub struct BrokerArgs {
    /// TOML configuration file (see docs/operations.md).
    #[arg(long, env = "BORGES_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory [default: ./borges-data].
    #[arg(long, env = "BORGES_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Main listen address, served by every core [default: 127.0.0.1:9292].
    #[arg(long, env = "BORGES_LISTEN", value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Executor cores [default: every CPU available to the process].
    #[arg(long, env = "BORGES_CORES", value_name = "N")]
    pub cores: Option<usize>,
    /// First per-core port (core N listens on BASE+N); 0 picks ephemeral ports
    /// [default: listen port + 1].
    #[arg(long, env = "BORGES_CORE_PORT_BASE", value_name = "PORT")]
    pub core_port_base: Option<u16>,
    /// Prometheus metrics address; "" disables [default: 127.0.0.1:9464].
    #[arg(long, env = "BORGES_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Host advertised to clients in Metadata [default: the listen host].
    #[arg(long, env = "BORGES_ADVERTISED_HOST", value_name = "HOST")]
    pub advertised_host: Option<String>,
    /// Broker id, Kafka's node.id [default: 0].
    #[arg(
        long,
        visible_alias = "node-id",
        env = "BORGES_BROKER_ID",
        value_name = "ID"
    )]
    pub broker_id: Option<i32>,
    /// Controller-link listener of a cluster member (Raft, registration, heartbeats).
    #[arg(long, env = "BORGES_CONTROLLER_LISTEN", value_name = "HOST:PORT")]
    pub controller_listen: Option<String>,
    /// The controller quorum, comma-separated id@host:port; makes this broker a cluster
    /// member (a voter if its node id is listed, else broker-only). Needs a directory
    /// prepared with `borges storage format`.
    #[arg(
        long,
        env = "BORGES_CONTROLLER_VOTERS",
        value_name = "ID@HOST:PORT,..."
    )]
    pub controller_voters: Option<String>,
    /// TLS certificate chain (PEM) of the client listeners (`tls.cert_file`); with the key
    /// it turns TLS on. Taken from the global `--tls-cert` of the `borges` command.
    #[arg(skip)]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of the certificate (`tls.key_file`); the global `--tls-key`.
    #[arg(skip)]
    pub tls_key: Option<PathBuf>,
    /// CAs (PEM) this broker trusts when it connects to other brokers (`tls.ca_file`); the
    /// global `--tls-ca`.
    #[arg(skip)]
    pub tls_ca: Option<PathBuf>,
    /// Require client certificates signed by these CAs (PEM): mTLS (`tls.client_ca_file`).
    #[arg(long, env = "BORGES_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// SASL mechanisms every client listener requires (`sasl.mechanisms`), comma-separated:
    /// SCRAM-SHA-256, SCRAM-SHA-512.
    #[arg(
        long,
        env = "BORGES_SASL_ENABLED_MECHANISMS",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub sasl_enabled_mechanisms: Option<Vec<String>>,
    /// The SCRAM credentials file (`sasl.credentials_file`; `borges user create` writes it).
    #[arg(long, env = "BORGES_SASL_CREDENTIALS_FILE", value_name = "FILE")]
    pub sasl_credentials_file: Option<PathBuf>,
    /// Write a JSON file with the bound addresses once every core serves.
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
    /// Print the effective configuration (defaults, file, environment and flags merged) as
    /// TOML, then exit without starting.
    #[arg(long)]
    pub print_config: bool,
    /// Log format.
    #[arg(long, env = "BORGES_LOG_FORMAT", value_parser = ["text", "json"], default_value = "text")]
    pub log_format: String,
}

impl BrokerArgs {
    /// The effective configuration.
    pub fn resolve(&self) -> Result<BrokerConfig, crate::BrokerError> {
        let mut config = match &self.config {
            Some(path) => BrokerConfig::from_toml_file(path)?,
            None => BrokerConfig::default(),
        };
        if let Some(v) = &self.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = &self.listen {
            config.listen = v.clone();
        }
        if let Some(v) = self.cores {
            config.cores = v;
        }
        if let Some(v) = self.core_port_base {
            config.core_port_base = Some(v);
        }
        if let Some(v) = &self.metrics_listen {
            config.metrics_listen = v.clone();
        }
        if let Some(v) = &self.advertised_host {
            config.advertised_host = Some(v.clone());
        }
        if let Some(v) = self.broker_id {
            config.broker_id = v;
        }
        if let Some(v) = &self.ready_file {
            config.ready_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_cert {
            config.tls.cert_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_key {
            config.tls.key_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_client_ca {
            config.tls.client_ca_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_ca {
            config.tls.ca_file = Some(v.clone());
        }
        if let Some(v) = &self.sasl_enabled_mechanisms {
            config.sasl.mechanisms = v.clone();
        }
        if let Some(v) = &self.sasl_credentials_file {
            config.sasl.credentials_file = Some(v.clone());
        }
        if let Some(v) = &self.controller_listen {
            config.cluster.controller_listen = Some(v.clone());
        }
        if let Some(v) = &self.controller_voters {
            config.cluster.controller_voters = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        config.resolve_hosts()?;
        config.validate()?;
        config
            .cluster
            .validate(config.broker_id)
            .map_err(|m| crate::BrokerError::Config(format!("[cluster] {m}")))?;
        Ok(config)
    }
}

/// Runs the broker until SIGTERM or SIGINT; returns once it has shut down cleanly.
pub fn run(args: BrokerArgs) -> Result<(), crate::BrokerError> {
    if args.print_config {
        let text = args.resolve()?.to_toml();
        // A closed pipe (`| head`) is not an error of the broker.
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
        return Ok(());
    }
    crate::logging::init(&args.log_format);
    let config = args.resolve()?;
    crate::server::run(config)
}
