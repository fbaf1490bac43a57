//! The ADS stream: subscribe, apply or refuse each response, acknowledge,
//! reconnect.

use super::convert::compile;
use super::proto::{RateLimitConfig, TYPE_URL};
use super::XdsSource;
use crate::metrics::Metrics;
use crate::rls::config::{digest_of, ConfigError};
use crate::rls::reload::{ConfigCell, Origin};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// gRPC's `INVALID_ARGUMENT`, the code of a refused response.
const INVALID_ARGUMENT: i32 = 3;

/// Starts the client: it keeps `cell` at the server's configuration for
/// as long as the process runs.
pub fn spawn(cell: Arc<ConfigCell>, metrics: Arc<Metrics>, source: XdsSource) {
    tokio::spawn(async move {
        let mut state = Acked::default();
        let mut failures = 0u32;
        loop {
            let responses = state.responses;
            let ended = session(&source, &cell, &metrics, &mut state).await;
            if state.responses > responses {
                failures = 0;
            }
            failures = failures.saturating_add(1);
            let delay = source.backoff.delay(failures, jitter());
            tracing::warn!(
                xds = %source.url,
                retry_in_ms = delay.as_millis() as u64,
                "xDS stream ended, the configuration in force stays: {ended}"
            );
            tokio::time::sleep(delay).await;
        }
    });
}

/// What the client acknowledged last.
#[derive(Debug, Default)]
struct Acked {
    /// The version of the configuration in force (empty: none yet).
    version: String,
    /// The digest of the resources in force.
    digest: Option<[u8; 32]>,
    /// Responses received, over every stream.
    responses: u64,
}

/// One stream, until it ends: why it ended.
async fn session(
    source: &XdsSource,
    cell: &ConfigCell,
    metrics: &Metrics,
    state: &mut Acked,
) -> String {
    let channel = match channel(source).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut client = AggregatedDiscoveryServiceClient::new(channel)
        .max_decoding_message_size(source.max_message_bytes);
    let (tx, rx) = mpsc::channel(4);
    let first = request(Some(node(source)), &state.version, "", None);
    if tx.send(first).await.is_err() {
        return "the request stream closed".into();
    }
    let outbound =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let mut call = tonic::Request::new(outbound);
    for (k, v) in &source.headers {
        let (Ok(k), Ok(v)) = (
            k.parse::<tonic::metadata::MetadataKey<_>>(),
            v.parse::<tonic::metadata::MetadataValue<_>>(),
        ) else {
            return format!("header {k:?} is not valid gRPC metadata");
        };
        call.metadata_mut().insert(k, v);
    }
    let mut inbound = match client.stream_aggregated_resources(call).await {
        Ok(r) => r.into_inner(),
        Err(e) => return format!("the server refused the stream: {e}"),
    };
    tracing::info!(xds = %source.url, node = %source.node_id, "xDS stream open");
    loop {
        let response = match inbound.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return "the server closed the stream".into(),
            Err(e) => return format!("{e}"),
        };
        state.responses += 1;
        let reply = answer(&response, source, cell, metrics, state);
        if tx.send(reply).await.is_err() {
            return "the request stream closed".into();
        }
    }
}

/// Applies or refuses one response: the ACK or NACK to send.
fn answer(
    response: &DiscoveryResponse,
    source: &XdsSource,
    cell: &ConfigCell,
    metrics: &Metrics,
    state: &mut Acked,
) -> DiscoveryRequest {
    let nonce = &response.nonce;
    let decided = decode(response)
        .and_then(|(configs, digest)| compile(&configs, cell.same_domain()).map(|d| (d, digest)));
    match decided {
        Ok((config, digest)) => {
            if state.digest != Some(digest) {
                let from = Origin::Xds {
                    server: &source.url,
                    version: &response.version_info,
                };
                cell.install(config, &digest, from, metrics);
                state.digest = Some(digest);
            }
            state.version.clone_from(&response.version_info);
            request(None, &state.version, nonce, None)
        }
        Err(e) => {
            cell.refuse(&e, metrics);
            tracing::warn!(
                xds = %source.url,
                version = %response.version_info,
                "xDS response refused (NACK)"
            );
            let status = RpcStatus {
                code: INVALID_ARGUMENT,
                message: e.to_string(),
                details: Vec::new(),
            };
            request(None, &state.version, nonce, Some(status))
        }
    }
}

/// The resources of a response and their digest; an error for a response
/// of another type or a resource that is no `RateLimitConfig`.
fn decode(response: &DiscoveryResponse) -> Result<(Vec<RateLimitConfig>, [u8; 32]), ConfigError> {
    let refused = |message: String| ConfigError::at(std::path::Path::new(""), "", message);
    if response.type_url != TYPE_URL {
        return Err(refused(format!(
            "type_url {:?}: expected {TYPE_URL}",
            response.type_url
        )));
    }
    let mut configs = Vec::with_capacity(response.resources.len());
    for (i, any) in response.resources.iter().enumerate() {
        if any.type_url != TYPE_URL {
            return Err(refused(format!(
                "resources[{i}]: type_url {:?}: expected {TYPE_URL}",
                any.type_url
            )));
        }
        let config = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| refused(format!("resources[{i}]: not a RateLimitConfig: {e}")))?;
        configs.push(config);
    }
    let digest = digest_of(response.resources.iter().map(|a| a.value.as_slice()));
    Ok((configs, digest))
}

/// A request of the stream: the subscription (with the node) or the
/// acknowledgement of a response (`error` set: its refusal).
fn request(
    node: Option<Node>,
    version: &str,
    nonce: &str,
    error: Option<RpcStatus>,
) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.to_string(),
        node,
        type_url: TYPE_URL.to_string(),
        response_nonce: nonce.to_string(),
        error_detail: error,
        ..Default::default()
    }
}

fn node(source: &XdsSource) -> Node {
    let fields = source
        .node_metadata
        .iter()
        .map(|(k, v)| {
            let value = Value {
                kind: Some(Kind::StringValue(v.clone())),
            };
            (k.clone(), value)
        })
        .collect();
    Node {
        id: source.node_id.clone(),
        cluster: source.node_cluster.clone(),
        metadata: Some(Struct { fields }),
        user_agent_name: "sluice-limiter".into(),
        ..Default::default()
    }
}

/// A connected channel to the server (TLS as the URL and the files say).
async fn channel(source: &XdsSource) -> Result<Channel, String> {
    let mut endpoint = Endpoint::from_shared(source.url.clone())
        .map_err(|e| format!("{}: not a URL: {e}", source.url))?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .tcp_nodelay(true);
    if source.url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(tls(source)?)
            .map_err(|e| format!("TLS: {e}"))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", source.url))
}

/// The TLS settings, the files read now (so a renewed certificate is used
/// at the next connection).
fn tls(source: &XdsSource) -> Result<ClientTlsConfig, String> {
    let read = |flag: &str, path: &std::path::PathBuf| {
        std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
    };
    let t = &source.tls;
    let mut config = ClientTlsConfig::new();
    if let Some(ca) = &t.ca {
        config = config.ca_certificate(Certificate::from_pem(read("--xds-ca", ca)?));
    }
    if let (Some(cert), Some(key)) = (&t.cert, &t.key) {
        let identity = Identity::from_pem(read("--xds-cert", cert)?, read("--xds-key", key)?);
        config = config.identity(identity);
    }
    if let Some(name) = &t.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// A number in [0, 1) for the backoff's jitter.
fn jitter() -> f64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 4];
    match ring::rand::SystemRandom::new().fill(&mut b) {
        Ok(()) => f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto::{RateLimitDescriptor, RateLimitPolicy};
    use super::super::{Backoff, XdsTls};
    use super::*;
    use crate::rls::config::SameDomain;
    use envoy_types::pb::google::protobuf::Any;

    fn source() -> XdsSource {
        XdsSource {
            url: "http://127.0.0.1:1".into(),
            node_id: "n".into(),
            node_cluster: String::new(),
            node_metadata: vec![("zone".into(), "a".into())],
            headers: Vec::new(),
            tls: XdsTls::default(),
            backoff: Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(1),
            },
            max_message_bytes: 1 << 20,
        }
    }

    fn response(version: &str, nonce: &str, unit: i32) -> DiscoveryResponse {
        let config = RateLimitConfig {
            name: "r".into(),
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit,
                    requests_per_unit: 2,
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        DiscoveryResponse {
            version_info: version.into(),
            resources: vec![Any {
                type_url: TYPE_URL.into(),
                value: config.encode_to_vec(),
            }],
            type_url: TYPE_URL.into(),
            nonce: nonce.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_good_response_is_acked_once_loaded_and_a_bad_one_nacked_with_the_version_in_force() {
        let cell = ConfigCell::awaiting(SameDomain::Refuse);
        let metrics = Metrics::default();
        let mut state = Acked::default();
        assert!(!cell.loaded());
        let ack = answer(
            &response("1", "a", 1),
            &source(),
            &cell,
            &metrics,
            &mut state,
        );
        assert_eq!(
            (ack.version_info.as_str(), ack.response_nonce.as_str()),
            ("1", "a")
        );
        assert!(ack.error_detail.is_none() && ack.node.is_none());
        assert!(cell.loaded() && cell.current().domains.contains_key("d"));
        let first = Arc::clone(&cell.current());
        // The same resources again (a reconnection's): acknowledged, not reloaded.
        let ack = answer(
            &response("1", "b", 1),
            &source(),
            &cell,
            &metrics,
            &mut state,
        );
        assert_eq!(ack.response_nonce, "b");
        assert!(Arc::ptr_eq(&first, &cell.current()));
        let nack = answer(
            &response("2", "c", 0),
            &source(),
            &cell,
            &metrics,
            &mut state,
        );
        assert_eq!(
            (nack.version_info.as_str(), nack.response_nonce.as_str()),
            ("1", "c")
        );
        let status = nack.error_detail.expect("a NACK");
        assert_eq!(status.code, INVALID_ARGUMENT);
        assert!(
            status
                .message
                .starts_with("xds:r: descriptors[0].rate_limit.unit: "),
            "{}",
            status.message
        );
        assert!(Arc::ptr_eq(&first, &cell.current()));
    }

    #[test]
    fn a_response_of_another_type_is_refused() {
        let cell = ConfigCell::awaiting(SameDomain::Refuse);
        let mut other = response("1", "a", 1);
        other.type_url = "type.googleapis.com/envoy.config.cluster.v3.Cluster".into();
        let nack = answer(
            &other,
            &source(),
            &cell,
            &Metrics::default(),
            &mut Acked::default(),
        );
        let message = nack.error_detail.expect("a NACK").message;
        assert!(
            message.starts_with("type_url \"type.googleapis.com/envoy.config.cluster.v3.Cluster\""),
            "{message}"
        );
        assert!(!cell.loaded());
    }

    #[test]
    fn the_subscription_names_the_node_and_the_type() {
        let first = request(Some(node(&source())), "", "", None);
        assert_eq!(first.type_url, TYPE_URL);
        let node = first.node.expect("the node");
        assert_eq!(
            (node.id.as_str(), node.user_agent_name.as_str()),
            ("n", "sluice-limiter")
        );
        let zone = &node.metadata.expect("metadata").fields["zone"];
        assert_eq!(zone.kind, Some(Kind::StringValue("a".into())));
    }
}
