//! The descriptor configuration from an xDS server, as envoyproxy/ratelimit
//! reads it (`CONFIG_TYPE=GRPC_XDS_SOTW`) and Envoy Gateway serves it to its
//! rate limit deployment: `RateLimitConfig` resources over the aggregated
//! discovery service, state of the world.
//!
//! Each response holds every resource; its resources are compiled as the
//! files they stand for would be ([`convert`]) and, if all of them compile,
//! put in force together and acknowledged with the response's version; if
//! one does not, the response is refused (a NACK whose `error_detail` names
//! the resource and the field) and the configuration in force stays.
//! Counters live under keys of the domain and the descriptors, so a new
//! configuration keeps them as a file reload does. When the stream ends or
//! the server cannot be reached, the configuration in force stays and the
//! client connects again after a backoff (doubling, jittered, reset once a
//! response arrives).

mod args;
mod client;
pub mod convert;
pub mod proto;

pub use args::XdsArgs;
pub use client::spawn;

use std::path::PathBuf;
use std::time::Duration;

/// The xDS server and how to reach it.
#[derive(Debug, Clone)]
pub struct XdsSource {
    /// `http://host:port` (plain gRPC) or `https://host:port` (TLS).
    pub url: String,
    /// The node the client introduces itself as: the server answers by it.
    pub node_id: String,
    /// The node's cluster (empty: none).
    pub node_cluster: String,
    /// The node's metadata, string values.
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent with the stream.
    pub headers: Vec<(String, String)>,
    /// TLS to the server (with an `https://` URL).
    pub tls: XdsTls,
    /// The first reconnection delay, doubled at each failure up to `max`.
    pub backoff: Backoff,
    /// The largest response accepted, in bytes.
    pub max_message_bytes: usize,
}

/// TLS material for the xDS server; empty: the system's roots are not
/// read, so an `https://` server needs `ca`.
#[derive(Debug, Clone, Default)]
pub struct XdsTls {
    /// PEM CA certificates the server's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// PEM client certificate (mutual TLS), with `key`.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the URL's
    /// host).
    pub server_name: Option<String>,
}

/// Reconnection delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// After the first failure.
    pub initial: Duration,
    /// At most.
    pub max: Duration,
}

impl Backoff {
    /// The delay after `failures` failures in a row (1: `initial`),
    /// jittered by `jitter` in [0, 1): between half of it and all of it.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        let doubled = self
            .initial
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        let full = doubled.min(self.max);
        full.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
    }
}

/// `key=value` pairs separated by commas (`a=1,b=2`); `sep` between key
/// and value.
pub fn pairs(text: &str, sep: char) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once(sep) {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(format!("{p:?}: expected key{sep}value")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_max_and_jitters_down_to_half() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1_000),
        };
        let full: Vec<u128> = (1..=6).map(|n| b.delay(n, 1.0).as_millis()).collect();
        assert_eq!(full, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(b.delay(2, 0.0).as_millis(), 100);
        assert_eq!(b.delay(u32::MAX, 1.0).as_millis(), 1_000);
    }

    #[test]
    fn pairs_split_on_commas_and_the_separator() {
        assert_eq!(
            pairs("a=1, b = x=y,", '=').unwrap(),
            [("a".into(), "1".into()), ("b".into(), "x=y".into())]
        );
        assert!(pairs("a", '=').unwrap_err().contains("key=value"));
        assert!(pairs("=1", '=').is_err());
    }
}
