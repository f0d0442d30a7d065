//! TCP for the broker: listeners (SO_REUSEPORT, so every core can listen on one address),
//! streams, and `send_file` that never stalls the core.
//!
//! glommio's sockets do every send and receive as a non-blocking system call and wait for
//! readiness through io_uring poll, so a stream can be switched to O_NONBLOCK without changing
//! how glommio drives it. [`TcpStream::send_file`] relies on that: `sendfile(2)` runs on the
//! blocking thread pool (a page-cache miss blocks that thread, not the core) on a non-blocking
//! socket; when the socket buffer is full it returns, and the core waits for writability by
//! sending the next single byte through glommio (so the wait is an io_uring poll), then resumes.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};

/// A listening socket. Lives on one core.
pub struct TcpListener {
    inner: glommio::net::TcpListener,
}

impl TcpListener {
    /// Binds `addr` with SO_REUSEPORT (several cores may bind the same address; the kernel
    /// spreads connections over them) and SO_REUSEADDR (a restarted broker can bind again while
    /// its previous connections linger in TIME_WAIT).
    pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
        Self::bind_with(addr, true)
    }

    /// Binds `addr` for this socket alone (no SO_REUSEPORT): fails with `AddrInUse` when any
    /// other socket, in this process or another, listens there. For addresses only one core
    /// serves (per-core ports, metrics), so that a clash is an error instead of two servers
    /// silently sharing connections.
    pub fn bind_exclusive(addr: SocketAddr) -> io::Result<TcpListener> {
        Self::bind_with(addr, false)
    }

    /// Checks that nobody else listens on `addr` (a shared SO_REUSEPORT address would
    /// otherwise be joined silently by a second broker) by binding it briefly without
    /// SO_REUSEPORT. Call before the cores bind it.
    pub fn probe_free(addr: SocketAddr) -> io::Result<()> {
        listening_socket(addr, false).map(drop)
    }

    fn bind_with(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
        let socket = listening_socket(addr, reuse_port)?;
        let fd = std::os::fd::IntoRawFd::into_raw_fd(socket);
        // SAFETY: `fd` is a bound, listening TCP socket whose ownership moves to glommio.
        let inner = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
        Ok(TcpListener { inner })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.local_addr()?)
    }

    /// Accepts one connection, switched to O_NONBLOCK and TCP_NODELAY.
    pub async fn accept(&self) -> io::Result<TcpStream> {
        let inner = self.inner.accept().await?;
        let stream = TcpStream { inner, tls: None };
        stream.configure()?;
        Ok(stream)
    }
}

/// Backlog of every listening socket.
pub const LISTEN_BACKLOG: i32 = 1024;

fn listening_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket)
}

/// A connected stream, plain or (after [`TcpStream::accept_tls`] or
/// [`TcpStream::connect_tls`]) TLS. Lives on one core.
pub struct TcpStream {
    inner: glommio::net::TcpStream,
    /// The TLS session, shared with the stream's clones.
    tls: Option<Rc<crate::tls::Session>>,
}

/// What a server-side TLS handshake found.
pub enum Accepted {
    /// The handshake completed: the stream speaks TLS from now on.
    Tls(TcpStream),
    /// The peer's first bytes are not a TLS handshake record: a plaintext client. `head` holds
    /// the bytes read (at least one), so that the server can answer it in plaintext.
    Plaintext { stream: TcpStream, head: Vec<u8> },
}

impl TcpStream {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
        let inner = glommio::net::TcpStream::connect(addr).await?;
        let stream = TcpStream { inner, tls: None };
        stream.configure()?;
        Ok(stream)
    }

    fn configure(&self) -> io::Result<()> {
        self.inner.set_nodelay(true)?;
        set_nonblocking(self.inner.as_raw_fd())
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.peer_addr()?)
    }

    /// Runs a server-side TLS handshake (callers bound it with a timeout). A peer whose first
    /// byte is not a TLS handshake record is handed back as [`Accepted::Plaintext`].
    pub async fn accept_tls(
        mut self,
        config: Arc<rustls::ServerConfig>,
    ) -> Result<Accepted, crate::tls::TlsError> {
        let mut head = vec![0u8; crate::tls::TLS_READ_CHUNK_BYTES];
        let n = self.inner.read(&mut head).await?;
        if n == 0 {
            return Err(crate::tls::TlsError::Closed);
        }
        head.truncate(n);
        if head[0] != crate::tls::TLS_HANDSHAKE_RECORD_TYPE {
            return Ok(Accepted::Plaintext { stream: self, head });
        }
        let session = crate::tls::Session::new(crate::tls::server_connection(config)?);
        session.set_pending(head);
        if let Err(e) = session.handshake(&mut self.inner).await {
            if matches!(e, crate::tls::TlsError::Handshake(_)) {
                // The alert saying why is sent; unread bytes of the peer (a TLS 1.3 client
                // sends requests right after its Finished) would turn the close into a reset
                // that can destroy the alert before the peer reads it.
                crate::tls::linger(&mut self.inner).await;
            }
            return Err(e);
        }
        self.tls = Some(Rc::new(session));
        Ok(Accepted::Tls(self))
    }

    /// Runs a client-side TLS handshake with a server that must present a certificate for
    /// `name` (callers bound it with a timeout).
    pub async fn connect_tls(
        &mut self,
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<(), crate::tls::TlsError> {
        let session = crate::tls::Session::new(crate::tls::client_connection(config, name)?);
        session.handshake(&mut self.inner).await?;
        self.tls = Some(Rc::new(session));
        Ok(())
    }

    /// Whether the stream speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The subject of the certificate the TLS peer presented (mTLS), RFC 4514.
    pub fn tls_peer_subject(&self) -> Option<String> {
        self.tls.as_ref().and_then(|s| s.peer_subject())
    }

    /// Reads some bytes; 0 means the peer closed.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.tls {
            Some(session) => session.clone().read(&mut self.inner, buf).await,
            None => self.inner.read(buf).await,
        }
    }

    /// Writes the whole buffer.
    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &self.tls {
            Some(session) => session.clone().write_all(&mut self.inner, &[buf]).await,
            None => self.inner.write_all(buf).await,
        }
    }

    /// A second handle on the same socket (a duplicated descriptor), so that one task can read
    /// while another writes.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        use std::os::fd::FromRawFd;
        // SAFETY: dup of a descriptor we own; the new descriptor is owned by the new stream.
        let fd = unsafe { libc::dup(self.inner.as_raw_fd()) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor of a connected TCP socket.
        let inner = unsafe { glommio::net::TcpStream::from_raw_fd(fd) };
        Ok(TcpStream {
            inner,
            tls: self.tls.clone(),
        })
    }

    /// Writes every buffer, in order, with `writev(2)` (few system calls for many small
    /// buffers, no copy). When the socket buffer is full the core waits for writability through
    /// glommio, as `send_file` does.
    pub async fn write_all_vectored(&mut self, bufs: &[&[u8]]) -> io::Result<()> {
        if let Some(session) = &self.tls {
            return session.clone().write_all(&mut self.inner, bufs).await;
        }
        const IOV_MAX: usize = 1024;
        let socket = self.inner.as_raw_fd();
        let mut index = 0;
        let mut offset = 0;
        while index < bufs.len() {
            if bufs[index].len() == offset {
                index += 1;
                offset = 0;
                continue;
            }
            let iov: Vec<libc::iovec> = bufs[index..]
                .iter()
                .take(IOV_MAX)
                .enumerate()
                .map(|(i, b)| {
                    let b = if i == 0 { &b[offset..] } else { b };
                    libc::iovec {
                        iov_base: b.as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    }
                })
                .collect();
            // SAFETY: every iovec points into a live slice borrowed for this call.
            let n = unsafe { libc::writev(socket, iov.as_ptr(), iov.len() as libc::c_int) };
            if n < 0 {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        // Wait for writability by sending the next byte through glommio.
                        let byte = bufs[index][offset];
                        self.inner.write_all(&[byte]).await?;
                        offset += 1;
                        continue;
                    }
                    _ => return Err(err),
                }
            }
            let mut n = n as usize;
            while n > 0 {
                let left = bufs[index].len() - offset;
                if n >= left {
                    n -= left;
                    index += 1;
                    offset = 0;
                } else {
                    offset += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// Shuts down both directions (after a TLS close_notify).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        if let Some(session) = &self.tls {
            let _ = session.clone().close(&mut self.inner).await;
        }
        Ok(self.inner.shutdown(std::net::Shutdown::Both).await?)
    }

    /// Shuts down the sending direction only (the peer reads end of stream after what was
    /// sent), so that bytes the peer still sends can be read and dropped before closing:
    /// closing a socket with unread bytes sends a reset, which can destroy the last response
    /// before the peer reads it.
    pub async fn shutdown_write(&mut self) -> io::Result<()> {
        if let Some(session) = &self.tls {
            let _ = session.clone().close(&mut self.inner).await;
        }
        Ok(self.inner.shutdown(std::net::Shutdown::Write).await?)
    }

    /// Sends `length` bytes of `file` from `position` with `sendfile(2)`, without copying them
    /// through user space and without blocking the core (see the module docs). With
    /// `offload = false` the system call runs on the core itself, which is cheaper when the data
    /// is known to be in the page cache and blocks the core when it is not. Over TLS the range
    /// is read into memory on the blocking pool and encrypted (the copy path).
    pub async fn send_file(
        &mut self,
        file: Arc<OwnedFd>,
        position: u64,
        length: u64,
        offload: bool,
    ) -> io::Result<()> {
        if let Some(session) = self.tls.clone() {
            let end = position + length;
            let mut at = position;
            while at < end {
                let n = (end - at).min(crate::tls::TLS_FILE_CHUNK_BYTES as u64) as usize;
                let chunk = crate::tls::read_file_range(file.clone(), at, n).await?;
                session.write_all(&mut self.inner, &[&chunk]).await?;
                at += n as u64;
            }
            return Ok(());
        }
        let socket = self.inner.as_raw_fd();
        let end = position + length;
        let mut at = position;
        // Segment files are written with direct IO, so their data is usually not in the page
        // cache: ask for the whole range at once (one large read) instead of letting sendfile
        // fault it in one readahead window at a time.
        // SAFETY: advice on a descriptor we hold; no memory is passed.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                position as libc::off_t,
                length as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
        while at < end {
            let outcome = if offload {
                let file = file.clone();
                crate::task::spawn_blocking(move || sendfile_until_blocked(socket, &file, at, end))
                    .await
            } else {
                sendfile_until_blocked(socket, &file, at, end)
            };
            at = outcome.position;
            match outcome.result {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Wait for writability through glommio by sending the next byte.
                    let byte = read_one_byte(&file, at)?;
                    self.inner.write_all(&[byte]).await?;
                    at += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

struct SendfileOutcome {
    position: u64,
    result: io::Result<()>,
}

fn sendfile_until_blocked(socket: RawFd, file: &OwnedFd, mut at: u64, end: u64) -> SendfileOutcome {
    while at < end {
        let mut offset = at as libc::off_t;
        let count = (end - at).min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the duration of the call; `offset` is ours.
        let sent = unsafe { libc::sendfile(socket, file.as_raw_fd(), &mut offset, count) };
        if sent < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return SendfileOutcome {
                position: at,
                result: Err(err),
            };
        }
        if sent == 0 {
            return SendfileOutcome {
                position: at,
                result: Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "sendfile: file shorter than the range to send",
                )),
            };
        }
        at += sent as u64;
    }
    SendfileOutcome {
        position: at,
        result: Ok(()),
    }
}

fn read_one_byte(file: &OwnedFd, position: u64) -> io::Result<u8> {
    let mut byte = 0u8;
    // SAFETY: reading one byte into a local.
    let n = unsafe {
        libc::pread(
            file.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            position as libc::off_t,
        )
    };
    match n {
        1 => Ok(byte),
        0 => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file ended")),
        _ => Err(io::Error::last_os_error()),
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Opens `path` read-only with the page cache (not O_DIRECT), for `send_file`.
pub fn open_for_send(path: &std::path::Path) -> io::Result<OwnedFd> {
    Ok(std::fs::File::open(path)?.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn send_file_delivers_exact_range_to_slow_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let expected = data[1000..1000 + (6 << 20)].to_vec();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // Read slowly at first so that the sender sees a full socket buffer.
            std::thread::sleep(std::time::Duration::from_millis(200));
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        crate::executor::run_local(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let fd = Arc::new(open_for_send(&path).unwrap());
            stream
                .send_file(fd.clone(), 1000, 3 << 20, true)
                .await
                .unwrap();
            stream
                .send_file(fd, 1000 + (3 << 20), 3 << 20, false)
                .await
                .unwrap();
            stream.shutdown().await.unwrap();
        })
        .unwrap();
        let got = reader.join().unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes differ");
    }

    #[test]
    fn vectored_writes_keep_order_under_backpressure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let parts: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 256) as u8; 1 + (i as usize * 7) % 4000])
            .collect();
        let expected: Vec<u8> = parts.concat();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        crate::executor::run_local(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            let mut writer = stream.try_clone().unwrap();
            drop(stream);
            let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
            writer.write_all_vectored(&slices).await.unwrap();
            writer.shutdown().await.unwrap();
        })
        .unwrap();
        let got = reader.join().unwrap();
        assert!(got == expected, "bytes differ");
    }
}
