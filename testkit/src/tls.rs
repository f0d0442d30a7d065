//! Throwaway certificates for TLS tests (rcgen): a CA, a broker certificate for localhost and
//! 127.0.0.1, client certificates. Everything is generated into a temporary directory per test;
//! no key is ever committed.

use std::path::{Path, PathBuf};

/// A certificate and its key as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A certificate authority whose certificate is at `cert` and that can issue more.
pub struct TestCa {
    /// The CA certificate (PEM).
    pub cert: PathBuf,
    ca: rcgen::Certificate,
    key: rcgen::KeyPair,
    dir: PathBuf,
}

impl TestCa {
    /// A new CA named `name`, its files under `dir`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let ca = params.self_signed(&key).expect("CA certificate");
        let cert = dir.join(format!("{name}.pem"));
        std::fs::write(&cert, ca.pem()).expect("write CA");
        TestCa {
            cert,
            ca,
            key,
            dir: dir.to_path_buf(),
        }
    }

    /// Issues a certificate with subject `CN=<cn>,O=Borges Tests` for `names` (DNS names or IP
    /// addresses), written to `<stem>.pem` and `<stem>.key`.
    pub fn issue(&self, stem: &str, cn: &str, names: &[&str]) -> CertFiles {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Borges Tests");
        let cert = params
            .signed_by(&key, &self.ca, &self.key)
            .expect("certificate");
        let files = CertFiles {
            cert: self.dir.join(format!("{stem}.pem")),
            key: self.dir.join(format!("{stem}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).expect("write certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write key");
        files
    }

    /// A broker certificate valid for `localhost` and `127.0.0.1`.
    pub fn broker(&self, stem: &str) -> CertFiles {
        self.issue(stem, "broker", &["localhost", "127.0.0.1"])
    }
}

/// The TLS files a test's own connections use (controller links, the CLI): the CA to verify
/// nodes with and, for mTLS listeners, a client certificate.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// CA certificate (PEM).
    pub ca: PathBuf,
    /// Client certificate, for listeners that require one.
    pub identity: Option<CertFiles>,
}

impl TlsFiles {
    /// The rustls configuration of these files.
    pub fn client_config(&self) -> std::sync::Arc<rustls::ClientConfig> {
        let identity = self
            .identity
            .as_ref()
            .map(|c| (c.cert.as_path(), c.key.as_path()));
        borges_runtime::tls::client_config(&self.ca, identity).expect("TLS client config")
    }

    /// The `borges` CLI flags for these files.
    pub fn cli_args(&self) -> Vec<String> {
        let mut args = vec!["--tls-ca".to_string(), self.ca.display().to_string()];
        if let Some(c) = &self.identity {
            args.extend([
                "--tls-cert".to_string(),
                c.cert.display().to_string(),
                "--tls-key".to_string(),
                c.key.display().to_string(),
            ]);
        }
        args
    }
}
