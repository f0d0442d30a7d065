//! The load generator's error type.

/// Errors of the load generator library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadgenError {
    /// A workload file is invalid.
    #[error("invalid workload: {0}")]
    Workload(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `/proc` could not be read or parsed.
    #[error("/proc: {0}")]
    Proc(String),
    /// The driver (client library or broker) failed.
    #[error("{driver} driver: {message}")]
    Driver {
        /// `borges` or `kafka`.
        driver: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A result file could not be parsed or a report not written.
    #[error("report: {0}")]
    Report(String),
}

impl LoadgenError {
    /// A driver error.
    pub fn driver(driver: &'static str, message: impl std::fmt::Display) -> LoadgenError {
        LoadgenError::Driver {
            driver,
            message: message.to_string(),
        }
    }
}
