//! The listeners' connection metrics: connections open, and the ways a
//! connection ends before it is served, each by listener.

use super::labels::{listener_label, Counters, Listener, ListenerLabel};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A way a connection ends early (or a request never arrives), counted by
/// listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Closed on arrival: the listener was at its cap.
    Refused,
    /// Closed after the idle timeout with no byte either way.
    IdleClosed,
    /// An HTTP request not received within the request timeout.
    RequestTimeout,
    /// A TLS handshake that failed or did not finish in time.
    TlsHandshakeFailed,
    /// A connection to a TLS listener closed (or reset) before sending a
    /// byte: a TCP probe, not a failed handshake.
    TlsClosedBeforeHello,
}

impl Ending {
    const ALL: [Ending; 5] = [
        Ending::Refused,
        Ending::IdleClosed,
        Ending::RequestTimeout,
        Ending::TlsHandshakeFailed,
        Ending::TlsClosedBeforeHello,
    ];

    /// The counter's name (after `sluice_limiter_`) and help.
    fn counter(self) -> (&'static str, &'static str) {
        match self {
            Ending::Refused => (
                "connections_refused",
                "Connections closed on arrival because the listener was at --max-connections",
            ),
            Ending::IdleClosed => (
                "connections_idle_closed",
                "Connections closed after --idle-timeout-ms with no byte read or written",
            ),
            Ending::RequestTimeout => (
                "request_timeouts",
                "HTTP requests not received within --request-timeout-ms (answered 408)",
            ),
            Ending::TlsHandshakeFailed => (
                "tls_handshake_failures",
                "TLS handshakes that failed (plain text included) or did not finish within --request-timeout-ms",
            ),
            Ending::TlsClosedBeforeHello => (
                "tls_closed_before_hello",
                "Connections to a TLS listener closed before sending a byte (TCP probes); not handshake failures",
            ),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Connections {
    open: Family<ListenerLabel, Gauge>,
    refused: Counters<ListenerLabel>,
    idle_closed: Counters<ListenerLabel>,
    request_timeouts: Counters<ListenerLabel>,
    tls_handshake_failures: Counters<ListenerLabel>,
    tls_closed_before_hello: Counters<ListenerLabel>,
}

impl Connections {
    /// Registers the metrics, every listener's series shown at zero.
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "sluice_limiter_connections",
            "Connections open now, by listener",
            self.open.clone(),
        );
        for ending in Ending::ALL {
            let (name, help) = ending.counter();
            r.register(
                format!("sluice_limiter_{name}"),
                help,
                self.family(ending).clone(),
            );
        }
        for l in [Listener::Http, Listener::Grpc, Listener::Rlqs] {
            let labels = listener_label(l);
            self.open.get_or_create(&labels).set(0);
            for ending in Ending::ALL {
                self.family(ending).get_or_create(&labels).inc_by(0);
            }
        }
    }

    fn family(&self, ending: Ending) -> &Counters<ListenerLabel> {
        match ending {
            Ending::Refused => &self.refused,
            Ending::IdleClosed => &self.idle_closed,
            Ending::RequestTimeout => &self.request_timeouts,
            Ending::TlsHandshakeFailed => &self.tls_handshake_failures,
            Ending::TlsClosedBeforeHello => &self.tls_closed_before_hello,
        }
    }

    pub(super) fn ended(&self, listener: Listener, ending: Ending) {
        self.family(ending)
            .get_or_create(&listener_label(listener))
            .inc();
    }

    pub(super) fn ends(&self, listener: Listener, ending: Ending) -> u64 {
        self.family(ending)
            .get_or_create(&listener_label(listener))
            .get()
    }

    /// The gauge of connections open on `listener`.
    pub(super) fn open(&self, listener: Listener) -> Gauge {
        self.open.get_or_create(&listener_label(listener)).clone()
    }
}
