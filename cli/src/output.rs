//! What the client commands write besides their results: the log subscriber (the SDK's
//! warnings on standard error), progress lines on a terminal, and JSON documents.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

/// A progress line appears only after a command ran this long (short runs stay quiet).
const PROGRESS_DELAY_MS: u64 = 1_000;
/// How often the progress line is redrawn.
const PROGRESS_INTERVAL_MS: u64 = 500;

/// Where the command's output goes, decided once at start-up.
#[derive(Debug, Clone, Copy)]
pub struct Ui {
    /// `-q`: no warnings, no progress.
    pub quiet: bool,
    /// Standard error is a terminal (progress lines, colours).
    pub stderr_terminal: bool,
    /// Standard output is a terminal (records are visible there already).
    pub stdout_terminal: bool,
}

impl Ui {
    /// Looks at the real standard streams.
    pub fn detect(quiet: bool) -> Ui {
        Ui {
            quiet,
            stderr_terminal: std::io::stderr().is_terminal(),
            stdout_terminal: std::io::stdout().is_terminal(),
        }
    }

    /// Whether `produce` shows progress (its standard output is unused).
    pub fn produce_progress(&self) -> bool {
        !self.quiet && self.stderr_terminal
    }

    /// Whether `consume` shows progress: only when its records do not go to the same terminal.
    pub fn consume_progress(&self) -> bool {
        !self.quiet && self.stderr_terminal && !self.stdout_terminal
    }
}

/// Installs the log subscriber of the client commands: the SDK's warnings (a reset offset, a
/// failing broker, a retried produce) on standard error; `-v` info, `-vv` debug, `-vvv` trace;
/// `-q` nothing; `RUST_LOG` overrides. Colours only on a terminal and without `NO_COLOR`.
pub fn install_logging(verbose: u8, ui: &Ui) {
    let level = match (ui.quiet, verbose) {
        (true, _) => "off",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() && !ui.quiet => tracing_subscriber::EnvFilter::new(spec),
        _ => tracing_subscriber::EnvFilter::new(level),
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ui.stderr_terminal && !no_color)
        .with_target(verbose >= 2)
        .without_time()
        .try_init();
}

/// A progress line on standard error, redrawn in place; cleared by [`Progress::finish`].
pub struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing `render()` after [`PROGRESS_DELAY_MS`] when `enabled`.
    pub fn start(enabled: bool, render: impl Fn() -> String + Send + Sync + 'static) -> Progress {
        if !enabled {
            return Progress { task: None };
        }
        let render = Arc::new(render);
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(PROGRESS_DELAY_MS)).await;
            loop {
                {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r{}\x1b[K", render());
                    let _ = err.flush();
                }
                tokio::time::sleep(Duration::from_millis(PROGRESS_INTERVAL_MS)).await;
            }
        });
        Progress { task: Some(task) }
    }

    /// Stops drawing and clears the line.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `value` as one line of JSON (as `rpk ... --format json`).
pub fn print_json(out: &mut impl Write, value: &serde_json::Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)
}
