//! Serving connections: what every listener (HTTP and gRPC) holds against
//! clients that are slow, idle, broken or hostile.
//!
//! - **At most `max_connections` open per listener.** A connection accepted
//!   beyond it is closed at once (`sluice_limiter_connections_refused_total`),
//!   so that file descriptors stay available for the store and the other
//!   listener, and a flood of connections costs no memory per connection.
//! - **Idle connections close** after `idle_timeout` with no byte read or
//!   written, whatever the protocol stage: a TCP connection that never
//!   sends its first byte or its HTTP/2 preface, a keep-alive connection
//!   between requests, a client that stops reading its responses.
//! - **A request must arrive within `request_timeout`**: HTTP/1 headers
//!   trickled slower than that close the connection, a body never completed
//!   gets `408`, and an RLS call whose message never completes gets
//!   `CANCELLED` (how tonic ends a call past its timeout).
//! - HTTP/2 peers are pinged every [`H2_KEEPALIVE`]: one that does not
//!   answer within [`H2_KEEPALIVE_TIMEOUT`] is dropped. A connection has
//!   at most [`H2_MAX_STREAMS`] streams open, and one resetting streams
//!   faster than they are served gets a GOAWAY (hyper's and h2's guards).
//! - **TLS** (when the listener has a [`ListenerTls`], [`Acceptor::tls`]):
//!   the handshake runs in the connection's own task, within
//!   `request_timeout`, and one that fails or does not finish in time
//!   closes that connection only (`sluice_limiter_tls_handshake_failures_total`).
//!   A first byte that opens no TLS handshake record (plain text) closes the
//!   connection unanswered, since a TLS alert reads as an HTTP/0.9 body to a
//!   plain-text client; a connection closed before its first byte (a TCP
//!   probe) is counted apart (`sluice_limiter_tls_closed_before_hello_total`).

use crate::metrics::{Ending, Listener, Metrics};
use crate::spread::Spread;
use crate::tls::ListenerTls;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;

mod grpc;
mod http;
pub use grpc::{serve_grpc, Grpc};
pub use http::serve_http;

/// The shutdown signal every listener follows: true once it came.
pub type Stop = tokio::sync::watch::Receiver<bool>;

/// How often an HTTP/2 peer is pinged.
pub const H2_KEEPALIVE: Duration = Duration::from_secs(20);

/// How long a ping may go unanswered before the connection is dropped.
pub const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Concurrent streams per HTTP/2 connection (the peer opens more
/// connections beyond it; Envoy does).
pub const H2_MAX_STREAMS: u32 = 1000;

/// The pause after a failed `accept` (say, out of file descriptors), so the
/// loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// A connection with no byte read or written for this long is closed.
    pub idle_timeout: Duration,
    /// The longest time to receive a request (HTTP/1 headers; a whole
    /// request, body included, before it is answered `408`).
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// A connection counted against its listener's cap, closed when idle.
///
/// Reads fail with [`io::ErrorKind::TimedOut`] once nothing was read or
/// written for the idle timeout; dropping it frees its place under the cap.
pub struct Guarded<T> {
    inner: T,
    idle: Duration,
    last_activity: Instant,
    deadline: Pin<Box<Sleep>>,
    listener: Listener,
    metrics: Arc<Metrics>,
    _permit: OwnedSemaphorePermit,
}

impl<T> Guarded<T> {
    fn new(
        inner: T,
        permit: OwnedSemaphorePermit,
        idle: Duration,
        listener: Listener,
        metrics: Arc<Metrics>,
    ) -> Self {
        let now = Instant::now();
        metrics.connection_opened(listener);
        Guarded {
            inner,
            idle,
            last_activity: now,
            deadline: Box::pin(tokio::time::sleep_until(now + idle)),
            listener,
            metrics,
            _permit: permit,
        }
    }

    /// The connection is idle past its timeout (the deadline is moved
    /// lazily: activity only records the time, and a deadline reached early
    /// is pushed to the last activity plus the timeout).
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.last_activity + self.idle;
            if due <= Instant::now() {
                return true;
            }
            self.deadline.as_mut().reset(due);
        }
    }
}

impl Guarded<TcpStream> {
    /// The first byte the peer sent, left unread; `None` when it closed
    /// (or reset) the connection before sending one.
    async fn first_byte(&self) -> Option<u8> {
        let mut byte = [0u8; 1];
        match self.inner.peek(&mut byte).await {
            Ok(n) if n > 0 => Some(byte[0]),
            Ok(_) | Err(_) => None,
        }
    }
}

impl<T> Drop for Guarded<T> {
    fn drop(&mut self) {
        self.metrics.connection_closed(self.listener);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.last_activity = Instant::now();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if self.idle_expired(cx) {
                    self.metrics
                        .connection_ended(self.listener, Ending::IdleClosed);
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle past its timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &written {
            if *n > 0 {
                self.last_activity = Instant::now();
            }
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &written {
            if *n > 0 {
                self.last_activity = Instant::now();
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection as served: plain, or TLS once its handshake is done.
pub enum Conn {
    /// No TLS on the listener.
    Plain(Guarded<TcpStream>),
    /// A finished TLS handshake.
    Tls(Box<TlsStream<Guarded<TcpStream>>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(io) => io.is_write_vectored(),
            Conn::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_flush(cx),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Drives `conn` until it closes, or, once `stop` turns true, until its
/// requests in flight are answered (idle ones close at once).
async fn drive<C>(conn: C, mut stop: Stop)
where
    C: hyper_util::server::graceful::GracefulConnection,
    C::Error: std::fmt::Display,
{
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::trace!("connection ended: {e}");
            }
            return;
        }
        _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
    }
    if let Err(e) = conn.await {
        tracing::trace!("connection ended: {e}");
    }
}

/// The accept queue asked of the kernel (capped by `net.core.somaxconn`):
/// a burst of connections waits there rather than having its SYNs dropped,
/// which would cost every client caught in it a one-second retransmission.
const BACKLOG: u32 = 4096;

/// A TCP listener on `addr` with a deep accept queue ([`BACKLOG`]).
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// A listener that hands out [`Guarded`] connections within its cap.
pub struct Acceptor {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    limits: Limits,
    name: Listener,
    metrics: Arc<Metrics>,
    tls: Option<Arc<ListenerTls>>,
}

impl Acceptor {
    /// Accepts on `listener` within `limits`, counting in `metrics` under `name`.
    pub fn new(
        listener: TcpListener,
        limits: Limits,
        name: Listener,
        metrics: Arc<Metrics>,
    ) -> Self {
        Acceptor {
            listener,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            limits,
            name,
            metrics,
            tls: None,
        }
    }

    /// Serves TLS with `tls` (none: plain text).
    #[must_use]
    pub fn tls(mut self, tls: Option<ListenerTls>) -> Self {
        self.tls = tls.map(Arc::new);
        self
    }

    /// The next connection with a place under the cap; connections beyond
    /// it are closed as they come, and accept errors wait a moment. Not yet
    /// guarded: that is done on the runtime that serves it ([`Placed::guard`]).
    async fn accept_placed(&self) -> (TcpStream, OwnedSemaphorePermit) {
        loop {
            match self.listener.accept().await {
                Ok((tcp, _)) => {
                    let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                        self.metrics.connection_ended(self.name, Ending::Refused);
                        crate::warn_throttled!(
                            listener = self.name.label(),
                            max = self.limits.max_connections,
                            "connection limit reached (--max-connections): new connections are closed"
                        );
                        drop(tcp);
                        continue;
                    };
                    // Answers are small and latency-bound: Nagle's algorithm
                    // would hold a write back until the peer's delayed ACK.
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!("cannot set TCP_NODELAY: {e}");
                    }
                    return (tcp, permit);
                }
                Err(e) => {
                    crate::warn_throttled!(listener = self.name.label(), error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    /// The next connection, guarded on this runtime.
    #[cfg(test)]
    async fn accept(&self) -> Option<Guarded<TcpStream>> {
        let (tcp, permit) = self.accept_placed().await;
        self.place(tcp, permit)?.guard()
    }

    /// A connection just accepted, to be served on another runtime: taken
    /// off this one's I/O driver (`None`, the connection closed, if it
    /// cannot be).
    fn place(&self, tcp: TcpStream, permit: OwnedSemaphorePermit) -> Option<Placed> {
        match tcp.into_std() {
            Ok(tcp) => Some(Placed {
                tcp,
                permit,
                idle: self.limits.idle_timeout,
                name: self.name,
                metrics: Arc::clone(&self.metrics),
            }),
            Err(e) => {
                tracing::debug!("cannot move a connection to its thread: {e}");
                None
            }
        }
    }

    /// Closes the listening socket (new clients are refused at once), then
    /// waits until every connection this acceptor handed out is closed.
    async fn close(self) {
        let Acceptor {
            listener,
            permits,
            limits,
            ..
        } = self;
        drop(listener);
        let all = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
        let _ = permits.acquire_many(all).await;
    }

    /// Accepts until `stop` turns true, each connection guarded and taken
    /// through the listener's handshake on the thread `spread` puts it on,
    /// then served there by `serve` (told of `stop` too); then closes the
    /// listening socket and returns once every connection is closed.
    pub async fn serve_each<S, F>(self, mut stop: Stop, spread: Arc<Spread>, serve: S)
    where
        S: Fn(Conn, Stop) -> F + Clone + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let handshake = Handshake::of(&self);
        loop {
            let (tcp, permit) = tokio::select! {
                accepted = self.accept_placed() => accepted,
                _ = stop.wait_for(|s| *s) => break,
            };
            let Some(placed) = self.place(tcp, permit) else {
                continue;
            };
            let (serve, handshake, stop) = (serve.clone(), handshake.clone(), stop.clone());
            spread.spawn(async move {
                let Some(io) = placed.guard() else {
                    return;
                };
                if let Some(io) = handshake.run(io).await {
                    serve(io, stop).await;
                }
            });
        }
        self.close().await;
    }
}

/// An accepted connection on its way to the runtime that serves it.
struct Placed {
    tcp: std::net::TcpStream,
    permit: OwnedSemaphorePermit,
    idle: Duration,
    name: Listener,
    metrics: Arc<Metrics>,
}

impl Placed {
    /// The connection on the current runtime, guarded (`None`: it could
    /// not be registered there, and is closed).
    fn guard(self) -> Option<Guarded<TcpStream>> {
        match TcpStream::from_std(self.tcp) {
            Ok(tcp) => Some(Guarded::new(
                tcp,
                self.permit,
                self.idle,
                self.name,
                self.metrics,
            )),
            Err(e) => {
                tracing::debug!("cannot register a connection on its thread: {e}");
                None
            }
        }
    }
}

/// What a connection goes through before it is served: the listener's TLS
/// handshake, if any, within the request timeout.
#[derive(Clone)]
struct Handshake {
    tls: Option<Arc<ListenerTls>>,
    timeout: Duration,
    name: Listener,
    metrics: Arc<Metrics>,
}

impl Handshake {
    fn of(acceptor: &Acceptor) -> Self {
        Handshake {
            tls: acceptor.tls.clone(),
            timeout: acceptor.limits.request_timeout,
            name: acceptor.name,
            metrics: Arc::clone(&acceptor.metrics),
        }
    }

    /// The connection ready to serve; `None` (the connection closed, the
    /// failure counted) when its handshake fails or takes too long, or
    /// when it closed before saying anything (counted apart).
    async fn run(&self, io: Guarded<TcpStream>) -> Option<Conn> {
        let Some(tls) = &self.tls else {
            return Some(Conn::Plain(io));
        };
        let error = match tokio::time::timeout(self.timeout, shake(tls, io)).await {
            Ok(Shaken::Done(conn)) => return Some(conn),
            Ok(Shaken::ClosedBeforeHello) => {
                let ending = Ending::TlsClosedBeforeHello;
                self.metrics.connection_ended(self.name, ending);
                return None;
            }
            Ok(Shaken::Failed(e)) => e,
            Err(_) => format!("not done within {} ms", self.timeout.as_millis()),
        };
        self.metrics
            .connection_ended(self.name, Ending::TlsHandshakeFailed);
        crate::warn_throttled!(listener = self.name.label(), error = %error, "TLS handshake failed");
        None
    }
}

/// How a connection to a TLS listener opens, told by its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// Closed or reset before a byte: a TCP probe.
    Closed,
    /// A TLS record of type handshake (22), as a ClientHello starts.
    Hello,
    /// Anything else: a plain-text client, or noise.
    NotTls,
}

/// The content type of a TLS handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 22;

impl Opening {
    fn of(first: Option<u8>) -> Opening {
        match first {
            None => Opening::Closed,
            Some(TLS_HANDSHAKE_RECORD) => Opening::Hello,
            Some(_) => Opening::NotTls,
        }
    }
}

/// How a TLS listener's handshake ended.
enum Shaken {
    Done(Conn),
    ClosedBeforeHello,
    Failed(String),
}

/// Takes `io` through `tls`'s handshake. A connection that does not open
/// with a handshake record is dropped without a byte written: rustls would
/// answer it with an alert, which a plain-text client reads as HTTP/0.9.
async fn shake(tls: &ListenerTls, io: Guarded<TcpStream>) -> Shaken {
    match Opening::of(io.first_byte().await) {
        Opening::Closed => Shaken::ClosedBeforeHello,
        Opening::NotTls => Shaken::Failed("not a TLS handshake record: closed unanswered".into()),
        Opening::Hello => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
            match acceptor.accept(io).await {
                Ok(stream) => Shaken::Done(Conn::Tls(Box::new(stream))),
                Err(e) => Shaken::Failed(e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn permit() -> OwnedSemaphorePermit {
        Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap()
    }

    #[tokio::test]
    async fn an_idle_connection_fails_its_read_and_activity_keeps_it() {
        let metrics = Arc::new(Metrics::default());
        let (client, server) = tokio::io::duplex(64);
        let idle = Duration::from_millis(100);
        let mut conn = Guarded::new(server, permit(), idle, Listener::Http, Arc::clone(&metrics));
        assert_eq!(metrics.open_connections(Listener::Http), 1);

        // Bytes every 40 ms: never idle for 100 ms.
        let (mut rx, mut tx) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            for _ in 0..6 {
                tokio::time::sleep(Duration::from_millis(40)).await;
                tx.write_all(b"x").await.unwrap();
            }
            tx
        });
        let mut buf = [0u8; 8];
        let mut got = 0;
        while got < 6 {
            got += conn.read(&mut buf).await.unwrap();
        }
        let _tx = writer.await.unwrap();

        // Then silence: the read fails once the timeout passes.
        let started = Instant::now();
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(90), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        assert!(metrics
            .render()
            .contains("sluice_limiter_connections_idle_closed_total{listener=\"http\"} 1"));
        drop(conn);
        assert_eq!(metrics.open_connections(Listener::Http), 0);
        let _ = rx.read(&mut buf).await;
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_on_arrival() {
        let metrics = Arc::new(Metrics::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: 1,
            ..Limits::default()
        };
        let acceptor = Arc::new(Acceptor::new(
            listener,
            limits,
            Listener::Grpc,
            Arc::clone(&metrics),
        ));
        let mut first = TcpStream::connect(addr).await.unwrap();
        let held = acceptor.accept().await;
        // The second is accepted and closed while the first holds the place.
        let mut second = TcpStream::connect(addr).await.unwrap();
        let waiting = {
            let acceptor = Arc::clone(&acceptor);
            tokio::spawn(async move { acceptor.accept().await })
        };
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
        assert!(metrics
            .render()
            .contains("sluice_limiter_connections_refused_total{listener=\"grpc\"} 1"));
        // Once the first goes, a new connection takes its place.
        drop(held);
        let _third = TcpStream::connect(addr).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(metrics.open_connections(Listener::Grpc), 1);
        drop(next);
        first.shutdown().await.unwrap();
    }

    fn client_config(
        ca: &std::path::Path,
        cert: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let mut config = match cert {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_file_iter(cert)
                        .unwrap()
                        .map(|c| c.unwrap())
                        .collect(),
                    PrivateKeyDer::from_pem_file(key).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }

    /// Waits until the gRPC listener counted `n` connections ending as `ending`.
    async fn endings(metrics: &Metrics, ending: Ending, n: u64) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while metrics.connection_endings(Listener::Grpc, ending) != n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
    }

    async fn handshake_failures(metrics: &Metrics, n: u64) {
        endings(metrics, Ending::TlsHandshakeFailed, n).await;
    }

    #[test]
    fn a_connection_opens_with_a_hello_plain_text_or_nothing() {
        assert_eq!(Opening::of(None), Opening::Closed);
        assert_eq!(Opening::of(Some(22)), Opening::Hello);
        // "GET", "PRI" (HTTP/2's preface), an SSLv2 hello, a TLS alert
        for first in [b'G', b'P', 0x80, 21] {
            assert_eq!(Opening::of(Some(first)), Opening::NotTls, "{first}");
        }
    }

    #[tokio::test]
    async fn a_failed_or_silent_handshake_closes_its_connection_only() {
        use crate::tls::testing::{ca, leaf, temp_dir};
        use crate::tls::{TlsCell, TlsFiles, ALPN_GRPC};
        let dir = temp_dir("handshake");
        let ca_cert = ca(&dir, "ca");
        let (cert, key) = leaf(&dir, "ca", "server", 1);
        let (client_cert, client_key) = leaf(&dir, "ca", "client", 2);
        let cell = Arc::new(
            TlsCell::load(TlsFiles {
                cert,
                key,
                client_ca: Some(ca_cert.clone()),
            })
            .unwrap(),
        );
        let metrics = Arc::new(Metrics::default());
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            request_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let acceptor = Acceptor::new(listener, limits, Listener::Grpc, Arc::clone(&metrics))
            .tls(Some(cell.listener(ALPN_GRPC)));
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let (served_tx, mut served) = tokio::sync::mpsc::channel::<Conn>(4);
        let serve = move |io: Conn, _stop: Stop| {
            let served_tx = served_tx.clone();
            async move {
                let _ = served_tx.send(io).await;
            }
        };
        let spread = Arc::new(Spread::threads(1).unwrap());
        tokio::spawn(acceptor.serve_each(stop, spread, serve));

        // A client that sends nothing holds no one up, and is closed.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let good = tokio_rustls::TlsConnector::from(client_config(
            &ca_cert,
            Some((&client_cert, &client_key)),
        ));
        let mut client = good
            .connect(name.clone(), TcpStream::connect(addr).await.unwrap())
            .await
            .unwrap();
        assert_eq!(client.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let served = served.recv().await.unwrap();
        assert!(matches!(served, Conn::Tls(_)));
        let mut buf = [0u8; 1];
        assert_eq!(silent.read(&mut buf).await.unwrap_or(0), 0);
        handshake_failures(&metrics, 1).await;

        // No client certificate: refused.
        let anonymous = tokio_rustls::TlsConnector::from(client_config(&ca_cert, None));
        if let Ok(mut tls) = anonymous
            .connect(name, TcpStream::connect(addr).await.unwrap())
            .await
        {
            assert!(tls.read(&mut buf).await.is_err());
        }
        handshake_failures(&metrics, 2).await;

        // TCP probes: connected and closed, counted apart.
        for _ in 0..3 {
            drop(TcpStream::connect(addr).await.unwrap());
        }
        endings(&metrics, Ending::TlsClosedBeforeHello, 3).await;
        // Plain text: closed with no byte written, a failure.
        let mut plain = TcpStream::connect(addr).await.unwrap();
        plain.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut reply = Vec::new();
        let _ = plain.read_to_end(&mut reply).await;
        assert_eq!(reply, b"");
        handshake_failures(&metrics, 3).await;
        let closed = Ending::TlsClosedBeforeHello;
        assert_eq!(metrics.connection_endings(Listener::Grpc, closed), 3);
        assert!(metrics
            .render()
            .contains("sluice_limiter_tls_closed_before_hello_total{listener=\"grpc\"} 3\n"));
        client.shutdown().await.unwrap();
    }
}
