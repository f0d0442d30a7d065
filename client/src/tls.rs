//! TLS to brokers (rustls with the ring provider, through tokio-rustls): the rustls
//! configuration built from [`TlsConfig`], the handshake, and errors that say what went wrong.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

use crate::config::TlsConfig;
use crate::error::{ClientError, Result};

fn file_error(path: &Path, e: impl std::fmt::Display) -> ClientError {
    ClientError::Tls {
        addr: path.display().to_string(),
        message: e.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no CERTIFICATE section"));
    }
    Ok(certs)
}

/// The rustls configuration of `tls`: its CAs as the only roots, its certificate (if any) as
/// the client identity.
pub(crate) fn client_config(tls: &TlsConfig) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(&tls.ca_file)? {
        roots.add(cert).map_err(|e| file_error(&tls.ca_file, e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::InvalidConfig(format!("tls: {e}")))?
        .with_root_certificates(roots);
    let config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| file_error(cert, e))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Runs the TLS handshake with `addr` over `stream` within `timeout_ms`; the broker's
/// certificate must be valid for the host of `addr`.
pub(crate) async fn handshake(
    addr: &str,
    stream: TcpStream,
    config: &Arc<rustls::ClientConfig>,
    timeout_ms: u64,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|e| ClientError::Tls {
        addr: addr.to_string(),
        message: format!("{host:?} is not a name a certificate can be checked against: {e}"),
    })?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let connect = connector.connect(name, stream);
    match tokio::time::timeout(Duration::from_millis(timeout_ms), connect).await {
        Err(_) => Err(ClientError::Timeout {
            what: "TLS handshake",
            timeout_ms,
        }),
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(ClientError::Tls {
            addr: addr.to_string(),
            message: explain(&e),
        }),
    }
}

/// A rustls error in an IO error, as text with a hint at the usual cause.
fn explain(e: &std::io::Error) -> String {
    let text = e.to_string();
    let hint = if text.contains("InvalidContentType") || text.contains("corrupt message") {
        " (the broker did not answer with TLS: does its listener have TLS on?)"
    } else if e.kind() == std::io::ErrorKind::UnexpectedEof {
        " (the broker closed the connection during the handshake)"
    } else if text.contains("UnknownIssuer") {
        " (the broker's certificate is not signed by a CA of --tls-ca)"
    } else if text.contains("CertificateRequired") {
        " (the broker requires a client certificate: --tls-cert and --tls-key)"
    } else {
        ""
    };
    format!("{text}{hint}")
}

/// An IO error on a connection: a TLS failure (an alert from the broker, such as a refused
/// client certificate) as [`ClientError::Tls`], anything else as [`ClientError::Io`].
pub(crate) fn io_error(addr: &str, e: std::io::Error) -> ClientError {
    let is_tls = e
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
    if is_tls {
        ClientError::Tls {
            addr: addr.to_string(),
            message: explain(&e),
        }
    } else {
        ClientError::io(addr, e)
    }
}
