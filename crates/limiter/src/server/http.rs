//! The HTTP listener: HTTP/1.1 and h2c, each connection served where the
//! [`Spread`] puts it, every request within the request timeout.

use super::{
    drive, Acceptor, Conn, Limits, Stop, H2_KEEPALIVE, H2_KEEPALIVE_TIMEOUT, H2_MAX_STREAMS,
};
use crate::metrics::{Ending, Listener, Metrics};
use crate::spread::Spread;
use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use sluice_wire::MAX_BODY_BYTES;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tower::ServiceExt;

/// The `408` of a request not received within the request timeout; the
/// HTTP/1 connection closes after it.
fn request_timeout_response(timeout: Duration) -> Response<Body> {
    closing_error(
        StatusCode::REQUEST_TIMEOUT,
        &format!("request not received within {} ms", timeout.as_millis()),
    )
}

/// A request announcing a body larger than any route takes: refused before
/// its body is read, instead of waiting for bytes that would be dropped.
fn announced_too_large(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > MAX_BODY_BYTES as u64)
}

/// A JSON error answer after which the HTTP/1 connection closes.
fn closing_error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::to_vec(&sluice_wire::ErrorBody {
        error: message.to_string(),
    })
    .unwrap_or_default();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    resp
}

/// Serves `router` over HTTP/1.1 and h2c on `acceptor` until `stop` turns
/// true, each connection where `spread` puts it; then stops accepting,
/// closes idle connections, lets requests in flight finish, and returns
/// once every connection is closed.
pub async fn serve_http(
    acceptor: Acceptor,
    router: Router,
    stop: Stop,
    spread: Arc<Spread>,
) -> io::Result<()> {
    let limits = acceptor.limits;
    let builder = Arc::new(http_builder(limits));
    let metrics = Arc::clone(&acceptor.metrics);
    let serve = move |io: Conn, stop: Stop| {
        let conn = Connection {
            router: router.clone(),
            metrics: Arc::clone(&metrics),
            builder: Arc::clone(&builder),
            stop,
            limits,
        };
        conn.serve(io)
    };
    acceptor.serve_each(stop, spread, serve).await;
    Ok(())
}

/// HTTP/1.1 and h2c within `limits`.
fn http_builder(limits: Limits) -> auto::Builder<Streams> {
    let mut builder = auto::Builder::new(Streams(Handle::current()));
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE)
        .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
        .max_concurrent_streams(H2_MAX_STREAMS);
    builder
}

/// Where an HTTP/2 connection's streams run: on the runtime that accepts
/// (its worker threads), so that one client's streams, say one Envoy's
/// multiplexed checks, are served on every core, while the connection's own
/// reads and writes stay on its connection thread.
#[derive(Clone)]
pub(super) struct Streams(pub(super) Handle);

impl<F> hyper::rt::Executor<F> for Streams
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, stream: F) {
        self.0.spawn(stream);
    }
}

/// What serving one HTTP connection needs.
struct Connection {
    router: Router,
    metrics: Arc<Metrics>,
    builder: Arc<auto::Builder<Streams>>,
    stop: Stop,
    limits: Limits,
}

impl Connection {
    /// Serves `io` until it closes, or, once `stop` turns true, until its
    /// requests in flight are answered.
    async fn serve(self, io: Conn) {
        let (router, metrics, limits) = (self.router, self.metrics, self.limits);
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let router = router.clone();
            let metrics = Arc::clone(&metrics);
            async move {
                if announced_too_large(&req) {
                    return Ok(closing_error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &format!("body exceeds 64 KiB ({MAX_BODY_BYTES} bytes)"),
                    ));
                }
                let call = router.oneshot(req.map(Body::new));
                match tokio::time::timeout(limits.request_timeout, call).await {
                    Ok(Ok(resp)) => Ok::<_, Infallible>(resp),
                    Ok(Err(never)) => match never {},
                    Err(_) => {
                        metrics.connection_ended(Listener::Http, Ending::RequestTimeout);
                        Ok(request_timeout_response(limits.request_timeout))
                    }
                }
            }
        });
        let conn = self.builder.serve_connection(TokioIo::new(io), service);
        drive(conn, self.stop).await;
    }
}
