//! TLS (rustls, ring provider) over the runtime's TCP streams.
//!
//! A [`crate::net::TcpStream`] may carry a TLS session: [`crate::net::TcpStream::accept_tls`]
//! and [`crate::net::TcpStream::connect_tls`] run the handshake, and from then on `read`,
//! `write_all`, `write_all_vectored`, `send_file` and the shutdowns go through the session, so
//! the broker's connection code does not change. The session is shared (an `Rc`) by the
//! stream's clones (`try_clone`: one task reads, another writes), on one core:
//! - reading decrypts through rustls; raw bytes rustls has not taken yet stay in the session;
//! - writing encrypts into rustls's send buffer and flushes it to the socket under a
//!   per-session write lock, so records of two writers never interleave. The reader flushes
//!   handshake and key-update messages only when no one holds the lock (whoever holds it
//!   flushes until the buffer is empty, so nothing is left behind);
//! - `send_file` cannot hand file pages to the socket (the bytes must be encrypted): it reads
//!   the range on the blocking pool into memory and writes it through the session (the copy
//!   path). Kernel TLS (kTLS) would give zero copy back; it is not used (docs/benchmarks.md).
//!
//! Also here: PEM loading, rustls configurations for servers and clients, and the subject of
//! a certificate as an RFC 4514 string (the principal of an mTLS client).

use std::cell::{Cell, RefCell};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;

use crate::sync::Notify;

/// Raw bytes read from a socket at once for TLS records.
pub const TLS_READ_CHUNK_BYTES: usize = 64 * 1024;

/// Encrypted bytes rustls buffers before a writer must flush them to the socket.
pub const TLS_SEND_BUFFER_BYTES_MAX: usize = 512 * 1024;

/// Bytes of a file range read into memory at once by `send_file` over TLS.
pub const TLS_FILE_CHUNK_BYTES: usize = 256 * 1024;

/// The first byte of a TLS handshake record (content type 22).
pub const TLS_HANDSHAKE_RECORD_TYPE: u8 = 0x16;

/// Errors of TLS set-up and handshakes.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {message}")]
    Pem { path: String, message: String },
    /// rustls refused a configuration (a key that does not match the certificate, ...).
    #[error("TLS configuration: {0}")]
    Config(String),
    /// The handshake failed (a certificate that does not verify, a protocol error, an alert
    /// from the peer).
    #[error("TLS handshake: {0}")]
    Handshake(rustls::Error),
    /// The peer closed the connection during the handshake.
    #[error("the peer closed the connection during the TLS handshake")]
    Closed,
    /// The socket failed during the handshake.
    #[error("TLS handshake: {0}")]
    Io(#[from] io::Error),
}

fn pem_error(path: &Path, message: impl ToString) -> TlsError {
    TlsError::Pem {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// The certificates of a PEM file (a chain: the leaf first).
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE section"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error(path, e))
}

/// A root store with every certificate of a PEM file.
pub fn load_roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certificates(path)? {
        roots.add(cert).map_err(|e| pem_error(path, e))?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration: this certificate chain and key; with `client_ca`, clients must
/// present a certificate signed by one of its certificates (mTLS).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = load_certificates(cert)?;
    let key = load_private_key(key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(load_roots(ca)?);
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| TlsError::Config(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("{} / {}: {e}", cert.display(), "key")))?;
    Ok(Arc::new(config))
}

/// A client configuration trusting the certificates of `ca`; with `identity` (certificate
/// chain, key) it presents that certificate to servers that ask for one (mTLS).
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = load_roots(ca)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certificates(cert)?, load_private_key(key)?)
            .map_err(|e| TlsError::Config(format!("{}: {e}", cert.display())))?,
    };
    Ok(Arc::new(config))
}

/// The name a client checks the server's certificate against: the host of `host:port` (an IP
/// address or a DNS name).
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| TlsError::Config(format!("{host:?} is not a host name for TLS: {e}")))
}

/// Where a process's TLS material lives (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    /// This process's certificate chain.
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
    /// CA certificates peers connecting to us must present a certificate of (mTLS).
    pub client_ca: Option<std::path::PathBuf>,
    /// CA certificates we trust when we connect to peers; unset: `client_ca`.
    pub ca: Option<std::path::PathBuf>,
}

/// The current server and client configurations of a process, reloadable (SIGHUP) without
/// touching established sessions: a connection takes the configuration current at its
/// handshake. Shared by every core; read once per handshake, not per request.
pub struct TlsContext {
    paths: TlsPaths,
    current: std::sync::RwLock<(Arc<rustls::ServerConfig>, Option<Arc<rustls::ClientConfig>>)>,
    reloads: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl TlsContext {
    /// Loads every file once.
    pub fn load(paths: TlsPaths) -> Result<TlsContext, TlsError> {
        let current = Self::build(&paths)?;
        Ok(TlsContext {
            paths,
            current: std::sync::RwLock::new(current),
            reloads: std::sync::atomic::AtomicU64::new(0),
        })
    }

    #[allow(clippy::type_complexity)]
    fn build(
        paths: &TlsPaths,
    ) -> Result<(Arc<rustls::ServerConfig>, Option<Arc<rustls::ClientConfig>>), TlsError> {
        let server = server_config(&paths.cert, &paths.key, paths.client_ca.as_deref())?;
        let client = match paths.ca.as_deref().or(paths.client_ca.as_deref()) {
            Some(ca) => Some(client_config(ca, Some((&paths.cert, &paths.key)))?),
            None => None,
        };
        Ok((server, client))
    }

    /// Reads the files again; on an error the previous configurations stay in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = Self::build(&self.paths)?;
        match self.current.write() {
            Ok(mut current) => *current = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        self.reloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Successful reloads so far.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The files.
    pub fn paths(&self) -> &TlsPaths {
        &self.paths
    }

    /// The server configuration for a new connection.
    pub fn server(&self) -> Arc<rustls::ServerConfig> {
        match self.current.read() {
            Ok(c) => c.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// The client configuration for connecting to peers (none without a CA to trust).
    pub fn client(&self) -> Option<Arc<rustls::ClientConfig>> {
        match self.current.read() {
            Ok(c) => c.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }
}

/// A TLS session shared by a stream and its clones. Lives on one core.
pub(crate) struct Session {
    conn: RefCell<rustls::Connection>,
    /// Raw bytes read from the socket that rustls has not taken yet: `pending[taken..]`.
    pending: RefCell<Vec<u8>>,
    taken: Cell<usize>,
    /// Encrypted records on their way to the socket, reused from flush to flush (a fresh
    /// buffer per flush had the kernel zero new pages for it); used under the write lock.
    outgoing: RefCell<Vec<u8>>,
    /// Held while a task flushes records to the socket.
    writing: Cell<bool>,
    write_done: Notify,
    /// The subject of the peer's certificate, when it presented one.
    peer_subject: RefCell<Option<String>>,
}

/// Releases the write lock on drop (also when the writing future is dropped).
struct WriteGuard<'a>(&'a Session);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.writing.set(false);
        self.0.write_done.notify_all();
    }
}

fn tls_io_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Session {
    pub(crate) fn new(mut conn: rustls::Connection) -> Session {
        conn.set_buffer_limit(Some(TLS_SEND_BUFFER_BYTES_MAX));
        Session {
            conn: RefCell::new(conn),
            pending: RefCell::new(Vec::new()),
            taken: Cell::new(0),
            outgoing: RefCell::new(Vec::new()),
            writing: Cell::new(false),
            write_done: Notify::default(),
            peer_subject: RefCell::new(None),
        }
    }

    pub(crate) fn peer_subject(&self) -> Option<String> {
        self.peer_subject.borrow().clone()
    }

    fn note_peer(&self) {
        let subject = self
            .conn
            .borrow()
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| certificate_subject(c));
        *self.peer_subject.borrow_mut() = subject;
    }

    pub(crate) fn set_pending(&self, raw: Vec<u8>) {
        *self.pending.borrow_mut() = raw;
        self.taken.set(0);
    }

    fn has_pending(&self) -> bool {
        self.taken.get() < self.pending.borrow().len()
    }

    /// Hands pending raw bytes to rustls until they are gone or plaintext is waiting to be
    /// read. A protocol error is returned (rustls queued an alert for it).
    fn feed(&self) -> Result<(), rustls::Error> {
        let pending = self.pending.borrow();
        let mut conn = self.conn.borrow_mut();
        while self.taken.get() < pending.len() {
            let mut rest = &pending[self.taken.get()..];
            let n = match conn.read_tls(&mut rest) {
                Ok(n) => n,
                // The plaintext buffer is full: the reader drains it first.
                Err(_) => return Ok(()),
            };
            self.taken.set(self.taken.get() + n);
            let state = conn.process_new_packets()?;
            if state.plaintext_bytes_to_read() > 0 || n == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Tells rustls the socket reached end of stream.
    fn feed_eof(&self) -> Result<(), rustls::Error> {
        let mut conn = self.conn.borrow_mut();
        let _ = conn.read_tls(&mut io::empty());
        conn.process_new_packets().map(drop)
    }

    /// Reads some raw bytes from the socket into `pending`; false at end of stream.
    async fn read_raw(&self, socket: &mut glommio::net::TcpStream) -> io::Result<bool> {
        use futures_lite::AsyncReadExt;
        let mut raw = std::mem::take(&mut *self.pending.borrow_mut());
        raw.clear();
        raw.resize(TLS_READ_CHUNK_BYTES, 0);
        let n = socket.read(&mut raw).await;
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                raw.clear();
                self.set_pending(raw);
                return Err(e);
            }
        };
        raw.truncate(n);
        self.set_pending(raw);
        Ok(n > 0)
    }

    async fn lock_write(&self) -> WriteGuard<'_> {
        loop {
            let seen = self.write_done.generation();
            if !self.writing.get() {
                self.writing.set(true);
                return WriteGuard(self);
            }
            self.write_done.changed_since(seen).await;
        }
    }

    /// Writes every record rustls has queued; the caller holds the write lock.
    async fn flush_locked(&self, socket: &mut glommio::net::TcpStream) -> io::Result<()> {
        let mut out = std::mem::take(&mut *self.outgoing.borrow_mut());
        let flushed = self.flush_through(socket, &mut out).await;
        // Kept for the next flush unless a burst made it larger than rustls's send buffer.
        if out.capacity() <= 2 * TLS_SEND_BUFFER_BYTES_MAX {
            out.clear();
            *self.outgoing.borrow_mut() = out;
        }
        flushed
    }

    /// [`Session::flush_locked`] through the buffer `out`.
    async fn flush_through(
        &self,
        socket: &mut glommio::net::TcpStream,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        use futures_lite::AsyncWriteExt;
        loop {
            out.clear();
            {
                let mut conn = self.conn.borrow_mut();
                while conn.wants_write() {
                    conn.write_tls(out)?;
                }
            }
            if out.is_empty() {
                return Ok(());
            }
            socket.write_all(out).await?;
        }
    }

    /// Flushes queued records unless another task is flushing (it will write them).
    async fn flush_if_free(&self, socket: &mut glommio::net::TcpStream) -> io::Result<()> {
        if self.writing.get() || !self.conn.borrow().wants_write() {
            return Ok(());
        }
        let _guard = self.lock_write().await;
        self.flush_locked(socket).await
    }

    /// Reads decrypted bytes into `buf`: as many as are available without waiting once some
    /// are; 0 at end of stream (a clean close_notify or the socket closing).
    pub(crate) async fn read(
        &self,
        socket: &mut glommio::net::TcpStream,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut filled = 0;
        loop {
            let got = self.conn.borrow_mut().reader().read(&mut buf[filled..]);
            match got {
                Ok(0) => return Ok(filled),
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        return Ok(filled);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(filled),
                Err(e) => return Err(e),
            }
            if self.has_pending() {
                if let Err(e) = self.feed() {
                    let _ = self.flush_if_free(socket).await;
                    return Err(tls_io_error(e));
                }
                continue;
            }
            if filled > 0 {
                return Ok(filled);
            }
            // Key updates and session tickets the peer's records asked for.
            self.flush_if_free(socket).await?;
            if !self.read_raw(socket).await? {
                self.feed_eof().map_err(tls_io_error)?;
            }
        }
    }

    /// Encrypts and writes every buffer, in order.
    pub(crate) async fn write_all(
        &self,
        socket: &mut glommio::net::TcpStream,
        bufs: &[&[u8]],
    ) -> io::Result<()> {
        let _guard = self.lock_write().await;
        for buf in bufs {
            let mut at = 0;
            while at < buf.len() {
                let n = self.conn.borrow_mut().writer().write(&buf[at..])?;
                at += n;
                if n == 0 {
                    self.flush_locked(socket).await?;
                }
            }
        }
        self.flush_locked(socket).await
    }

    /// Sends close_notify (the peer reads a clean end of stream).
    pub(crate) async fn close(&self, socket: &mut glommio::net::TcpStream) -> io::Result<()> {
        let _guard = self.lock_write().await;
        self.conn.borrow_mut().send_close_notify();
        self.flush_locked(socket).await
    }

    /// Runs the handshake to its end: flushes what rustls wants to send, feeds it what the
    /// peer sends.
    pub(crate) async fn handshake(
        &self,
        socket: &mut glommio::net::TcpStream,
    ) -> Result<(), TlsError> {
        loop {
            if self.has_pending() {
                if let Err(e) = self.feed() {
                    // The alert rustls queued tells the peer why.
                    let _ = self.flush_if_free(socket).await;
                    return Err(TlsError::Handshake(e));
                }
            }
            self.flush_if_free(socket).await?;
            if !self.conn.borrow().is_handshaking() {
                self.note_peer();
                return Ok(());
            }
            if self.has_pending() {
                continue;
            }
            if !self.read_raw(socket).await? {
                return Err(TlsError::Closed);
            }
        }
    }
}

/// How long a connection whose handshake failed is read (and dropped) after the alert.
pub const TLS_ALERT_LINGER_MS: u64 = 500;

/// Most bytes read and dropped while lingering after an alert.
pub const TLS_ALERT_LINGER_BYTES_MAX: usize = 1 << 20;

/// Shuts the sending side down and reads what the peer still sends, until it closes, for at
/// most [`TLS_ALERT_LINGER_MS`] and [`TLS_ALERT_LINGER_BYTES_MAX`].
pub(crate) async fn linger(socket: &mut glommio::net::TcpStream) {
    use futures_lite::AsyncReadExt;
    let _ = socket.shutdown(std::net::Shutdown::Write).await;
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(TLS_ALERT_LINGER_MS);
    let mut sink = vec![0u8; 16 * 1024];
    let mut dropped = 0;
    while dropped < TLS_ALERT_LINGER_BYTES_MAX {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match crate::time::timeout(left, socket.read(&mut sink)).await {
            Some(Ok(n)) if n > 0 => dropped += n,
            _ => return,
        }
    }
}

/// Reads `length` bytes of `file` from `position` on the blocking pool.
pub(crate) async fn read_file_range(
    file: Arc<std::os::fd::OwnedFd>,
    position: u64,
    length: usize,
) -> io::Result<Vec<u8>> {
    crate::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::from(file.try_clone()?);
        let mut buf = vec![0u8; length];
        file.read_exact_at(&mut buf, position)?;
        Ok(buf)
    })
    .await
}

/// One DER element: (tag, content, rest).
fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let length = if first < 0x80 {
        usize::from(first)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let mut length = 0usize;
        for &b in &rest[..octets] {
            length = (length << 8) | usize::from(b);
        }
        rest = &rest[octets..];
        length
    };
    if rest.len() < length {
        return None;
    }
    Some((tag, &rest[..length], &rest[length..]))
}

/// Dotted form of an OID's content octets.
fn oid_text(oid: &[u8]) -> String {
    let mut parts = Vec::new();
    let mut value = 0u64;
    for (i, &b) in oid.iter().enumerate() {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if parts.is_empty() && i < 4 {
                let first = (value / 40).min(2);
                parts.push(first);
                parts.push(value - first * 40);
            } else {
                parts.push(value);
            }
            value = 0;
        }
    }
    parts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

fn attribute_name(oid: &[u8]) -> String {
    match oid {
        [0x55, 0x04, 0x03] => "CN".into(),
        [0x55, 0x04, 0x06] => "C".into(),
        [0x55, 0x04, 0x07] => "L".into(),
        [0x55, 0x04, 0x08] => "ST".into(),
        [0x55, 0x04, 0x09] => "STREET".into(),
        [0x55, 0x04, 0x0a] => "O".into(),
        [0x55, 0x04, 0x0b] => "OU".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID".into(),
        other => oid_text(other),
    }
}

/// RFC 4514 escaping of an attribute value.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == value.chars().count() && c == ' ');
        if special {
            out.push('\\');
        }
        if c.is_control() {
            out.push_str(&format!("\\{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The subject of a DER certificate as an RFC 4514 string ("CN=client,O=Example"), the most
/// specific attribute first; `None` when the certificate cannot be read.
pub fn certificate_subject(der: &[u8]) -> Option<String> {
    let (0x30, certificate, _) = der_next(der)? else {
        return None;
    };
    let (0x30, tbs, _) = der_next(certificate)? else {
        return None;
    };
    let mut fields = tbs;
    let (tag, _, rest) = der_next(fields)?;
    if tag == 0xa0 {
        fields = rest; // explicit version
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        fields = der_next(fields)?.2;
    }
    let (0x30, mut name, _) = der_next(fields)? else {
        return None;
    };
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (0x31, mut set, rest) = der_next(name)? else {
            return None;
        };
        name = rest;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (0x30, pair, rest) = der_next(set)? else {
                return None;
            };
            set = rest;
            let (0x06, oid, value) = der_next(pair)? else {
                return None;
            };
            let (_, value, _) = der_next(value)?;
            let value = String::from_utf8_lossy(value);
            parts.push(format!("{}={}", attribute_name(oid), escape_value(&value)));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// Makes a client connection for `name`.
pub(crate) fn client_connection(
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
) -> Result<rustls::Connection, TlsError> {
    rustls::ClientConnection::new(config, name)
        .map(rustls::Connection::Client)
        .map_err(TlsError::Handshake)
}

/// Makes a server connection.
pub(crate) fn server_connection(
    config: Arc<rustls::ServerConfig>,
) -> Result<rustls::Connection, TlsError> {
    rustls::ServerConnection::new(config)
        .map(rustls::Connection::Server)
        .map_err(TlsError::Handshake)
}

/// Writes `bytes` to a fresh file `path` (test helper for certificates).
pub fn write_pem(path: &Path, pem: &str) -> io::Result<()> {
    std::fs::File::create(path)?.write_all(pem.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{Accepted, TcpListener, TcpStream};

    struct Pki {
        _dir: tempfile::TempDir,
        ca: std::path::PathBuf,
        cert: std::path::PathBuf,
        key: std::path::PathBuf,
        client_cert: std::path::PathBuf,
        client_key: std::path::PathBuf,
    }

    fn pki() -> Pki {
        pki_named("test ca")
    }

    fn pki_named(ca_name: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issue = |names: Vec<String>, cn: &str, stem: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(names).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, "Borges, Tests");
            let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
            let c = dir.path().join(format!("{stem}.pem"));
            let k = dir.path().join(format!("{stem}.key"));
            write_pem(&c, &cert.pem()).unwrap();
            write_pem(&k, &key.serialize_pem()).unwrap();
            (c, k)
        };
        let (cert, key) = issue(vec!["localhost".into(), "127.0.0.1".into()], "broker", "s");
        let (client_cert, client_key) = issue(vec![], "alice", "c");
        let ca_path = dir.path().join("ca.pem");
        write_pem(&ca_path, &ca.pem()).unwrap();
        Pki {
            _dir: dir,
            ca: ca_path,
            cert,
            key,
            client_cert,
            client_key,
        }
    }

    #[test]
    fn subject_of_a_generated_certificate() {
        let p = pki();
        let certs = load_certificates(&p.client_cert).unwrap();
        let subject = certificate_subject(&certs[0]).unwrap();
        assert_eq!(subject, "O=Borges\\, Tests,CN=alice");
        assert_eq!(certificate_subject(&certs[0][..40]), None);
        assert_eq!(certificate_subject(b""), None);
    }

    /// Echo over TLS with mTLS, large and vectored writes, file ranges, and close_notify.
    #[test]
    fn tls_round_trip_with_client_certificate() {
        let p = pki();
        let server = server_config(&p.cert, &p.key, Some(&p.ca)).unwrap();
        let client = client_config(&p.ca, Some((&p.client_cert, &p.client_key))).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..3 << 20).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        crate::executor::run_local(async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = listener.local_addr().unwrap();
            let serving = crate::task::spawn(async move {
                let stream = listener.accept().await.unwrap();
                let Accepted::Tls(mut stream) = stream.accept_tls(server).await.unwrap() else {
                    panic!("not TLS");
                };
                let subject = stream.tls_peer_subject();
                let mut writer = stream.try_clone().unwrap();
                let mut got = Vec::new();
                let mut buf = vec![0u8; 100_000];
                while got.len() < 3 << 20 {
                    let n = stream.read(&mut buf).await.unwrap();
                    assert!(n > 0);
                    got.extend_from_slice(&buf[..n]);
                }
                writer.write_all(&got[..1000]).await.unwrap();
                let fd = Arc::new(crate::net::open_for_send(&path).unwrap());
                writer
                    .send_file(fd, 1000, (3 << 20) - 1000, true)
                    .await
                    .unwrap();
                writer.shutdown_write().await.unwrap();
                subject
            });
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream
                .connect_tls(client, server_name("localhost").unwrap())
                .await
                .unwrap();
            let parts: Vec<&[u8]> = data.chunks(70_001).collect();
            stream.write_all_vectored(&parts).await.unwrap();
            let mut back = Vec::new();
            let mut buf = vec![0u8; 50_000];
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                back.extend_from_slice(&buf[..n]);
            }
            assert!(back == data, "echoed bytes differ ({} bytes)", back.len());
            let subject = serving.await;
            assert_eq!(subject.as_deref(), Some("O=Borges\\, Tests,CN=alice"));
        })
        .unwrap();
    }

    /// A client without a certificate, a client trusting another CA, and plaintext bytes are
    /// each refused by the handshake.
    #[test]
    fn handshakes_that_must_fail() {
        let p = pki();
        let other = pki_named("another ca");
        let server = server_config(&p.cert, &p.key, Some(&p.ca)).unwrap();
        crate::executor::run_local(async move {
            let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = listener.local_addr().unwrap();
            let serving = crate::task::spawn(async move {
                let mut outcomes = Vec::new();
                for _ in 0..3 {
                    let stream = listener.accept().await.unwrap();
                    outcomes.push(match stream.accept_tls(server.clone()).await {
                        Ok(Accepted::Tls(_)) => "tls".to_string(),
                        Ok(Accepted::Plaintext { head, .. }) => format!("plain {}", head[0]),
                        Err(e) => format!("error {e}"),
                    });
                }
                outcomes
            });
            // No client certificate: the server refuses the handshake.
            let no_cert = client_config(&p.ca, None).unwrap();
            let mut s = TcpStream::connect(addr).await.unwrap();
            let r = s
                .connect_tls(no_cert, server_name("localhost").unwrap())
                .await;
            if r.is_ok() {
                // TLS 1.3: the client learns of the refusal at its first read.
                let mut buf = [0u8; 16];
                assert!(s.read(&mut buf).await.is_err());
            }
            // Trusting another CA: the client refuses the server.
            let wrong_ca = client_config(&other.ca, None).unwrap();
            let mut s = TcpStream::connect(addr).await.unwrap();
            let err = s
                .connect_tls(wrong_ca, server_name("localhost").unwrap())
                .await
                .unwrap_err();
            assert!(err.to_string().contains("UnknownIssuer"), "{err}");
            // Plaintext.
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&[0, 0, 0, 24]).await.unwrap();
            let outcomes = serving.await;
            assert!(outcomes[0].starts_with("error"), "{outcomes:?}");
            assert!(outcomes[1].starts_with("error"), "{outcomes:?}");
            assert_eq!(outcomes[2], "plain 0", "{outcomes:?}");
        })
        .unwrap();
    }
}
