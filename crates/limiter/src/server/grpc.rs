//! The gRPC listeners (RLS, RLQS): HTTP/2 only, each connection served
//! where the [`Spread`] puts it, its calls on the same thread, each call
//! within its deadline.

use super::{drive, Acceptor, Conn, Stop, H2_KEEPALIVE, H2_KEEPALIVE_TIMEOUT, H2_MAX_STREAMS};
use crate::spread::Spread;
use axum::http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tower::{Service, ServiceExt};

/// What a gRPC listener serves.
pub struct Grpc<S> {
    /// The service: tonic's server of one gRPC service (a method it does
    /// not have answers `UNIMPLEMENTED`), or tonic's routes over several.
    pub service: S,
    /// The longest a call may take before it ends with `CANCELLED`
    /// (shortened by the client's `grpc-timeout`); none: only the
    /// client's, if it sends one.
    pub timeout: Option<Duration>,
}

/// Serves `grpc` over HTTP/2 on `acceptor` until `stop` turns true, each
/// connection where `spread` puts it; then stops accepting, lets calls in
/// flight finish (a stream that must end on `stop` is the service's to
/// end), and returns once every connection is closed.
pub async fn serve_grpc<S, B>(acceptor: Acceptor, grpc: Grpc<S>, stop: Stop, spread: Arc<Spread>)
where
    S: CallService<B>,
    B: AnswerBody,
{
    let Grpc { service, timeout } = grpc;
    let serve = move |io: Conn, stop: Stop| serve_connection(io, service.clone(), timeout, stop);
    acceptor.serve_each(stop, spread, serve).await;
}

/// A service a gRPC connection's calls are handed to.
pub trait CallService<B>:
    Service<Request<Incoming>, Response = Response<B>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static
{
}

impl<S, B> CallService<B> for S where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible, Future: Send>
        + Clone
        + Send
        + 'static
{
}

/// The body of a call's answer.
pub trait AnswerBody:
    hyper::body::Body<
        Data = hyper::body::Bytes,
        Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    > + Default
    + Send
    + 'static
{
}

impl<B> AnswerBody for B where
    B: hyper::body::Body<
            Data = hyper::body::Bytes,
            Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        > + Default
        + Send
        + 'static
{
}

/// HTTP/2 with the guards of every listener; a connection's calls run on
/// its own thread (`Handle::current()` there), as its reads and writes do.
fn builder() -> http2::Builder<super::http::Streams> {
    let mut builder = http2::Builder::new(super::http::Streams(Handle::current()));
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE)
        .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
        .max_concurrent_streams(H2_MAX_STREAMS)
        // gRPC has no use for it; it costs a header in every answer.
        .auto_date_header(false);
    builder
}

/// Serves one connection until it closes, or, once `stop` turns true,
/// until its calls in flight are answered.
async fn serve_connection<S, B>(io: Conn, service: S, timeout: Option<Duration>, stop: Stop)
where
    S: CallService<B>,
    B: AnswerBody,
{
    let calls = hyper::service::service_fn(move |req: Request<Incoming>| {
        let within = deadline(req.headers(), timeout);
        let call = service.clone().oneshot(req);
        async move {
            let Some(within) = within else {
                return call.await;
            };
            match tokio::time::timeout(within, call).await {
                Ok(answer) => answer,
                // As tonic ends a call past its timeout.
                Err(_) => Ok(tonic::Status::cancelled("Timeout expired").into_http()),
            }
        }
    });
    let conn = builder().serve_connection(TokioIo::new(io), calls);
    drive(conn, stop).await;
}

/// The time a call may take: the shorter of `server` and the client's
/// `grpc-timeout` (one it sends that cannot be read is ignored).
fn deadline(headers: &HeaderMap, server: Option<Duration>) -> Option<Duration> {
    let client = headers
        .get("grpc-timeout")
        .and_then(|v| grpc_timeout(v.as_bytes()));
    match (client, server) {
        (Some(c), Some(s)) => Some(c.min(s)),
        (c, s) => c.or(s),
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`,
/// `m`, `u`, `n`).
fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_as_the_protocol_spells_them() {
        assert_eq!(grpc_timeout(b"20m"), Some(Duration::from_millis(20)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        assert_eq!(grpc_timeout(b"5u"), Some(Duration::from_micros(5)));
        for bad in [&b""[..], b"m", b"123456789S", b"1x", b"-1S", b"1.5S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_shorter_of_the_server_and_the_client_deadline_holds() {
        let mut headers = HeaderMap::new();
        let server = Some(Duration::from_secs(10));
        assert_eq!(deadline(&headers, server), server);
        assert_eq!(deadline(&headers, None), None);
        headers.insert("grpc-timeout", "250m".parse().unwrap());
        let client = Some(Duration::from_millis(250));
        assert_eq!(deadline(&headers, server), client);
        assert_eq!(deadline(&headers, None), client);
        assert_eq!(
            deadline(&headers, Some(Duration::from_millis(5))),
            Some(Duration::from_millis(5))
        );
        headers.insert("grpc-timeout", "soon".parse().unwrap());
        assert_eq!(deadline(&headers, server), server);
    }

    /// A service answering `UNAVAILABLE` ("answered") after the delay its
    /// call asks for in `x-delay-ms`, served with `timeout`; its address,
    /// its stop switch, the server's task, and a signal of each call's arrival.
    async fn slow_server(
        timeout: Duration,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
        Arc<tokio::sync::Notify>,
    ) {
        use crate::metrics::{Listener, Metrics};
        let arrived = Arc::new(tokio::sync::Notify::new());
        let signal = Arc::clone(&arrived);
        let service = tower::service_fn(move |req: Request<Incoming>| {
            signal.notify_one();
            async move {
                let ms = req
                    .headers()
                    .get("x-delay-ms")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let answer =
                    tonic::Status::unavailable("answered").into_http::<tonic::body::Body>();
                Ok::<_, Infallible>(answer)
            }
        });
        let listener = super::super::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::default());
        let acceptor = Acceptor::new(
            listener,
            super::super::Limits::default(),
            Listener::Grpc,
            metrics,
        );
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let spread = Arc::new(Spread::threads(1).unwrap());
        let grpc = Grpc {
            service,
            timeout: Some(timeout),
        };
        let server = tokio::spawn(serve_grpc(acceptor, grpc, stop, spread));
        (addr, stop_tx, server, arrived)
    }

    async fn call(addr: std::net::SocketAddr, delay_ms: u64) -> tonic::Status {
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
        use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let mut req = tonic::Request::new(RateLimitRequest::default());
        req.metadata_mut()
            .insert("x-delay-ms", delay_ms.to_string().parse().unwrap());
        client.should_rate_limit(req).await.unwrap_err()
    }

    #[tokio::test]
    async fn a_call_past_the_timeout_ends_cancelled() {
        let (addr, _stop, _server, _) = slow_server(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let status = call(addr, 10_000).await;
        assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(call(addr, 0).await.message(), "answered");
    }

    #[tokio::test]
    async fn on_stop_calls_in_flight_are_answered_and_new_connections_refused() {
        let (addr, stop, server, arrived) = slow_server(Duration::from_secs(10)).await;
        let in_flight = tokio::spawn(call(addr, 400));
        arrived.notified().await;
        stop.send(true).unwrap();
        // The listening socket closes; the call in flight is still answered.
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            while tokio::net::TcpStream::connect(addr).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        closed.await.unwrap();
        let answered = in_flight.await.unwrap();
        assert_eq!(answered.code(), tonic::Code::Unavailable);
        assert_eq!(answered.message(), "answered");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }
}
