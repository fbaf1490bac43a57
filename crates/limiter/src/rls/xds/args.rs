//! The xDS source's flags (flattened into the limiter's command line).

use super::{pairs, Backoff, XdsSource, XdsTls};
use std::path::PathBuf;
use std::time::Duration;

/// Where the descriptors come from when they come from an xDS server.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct XdsArgs {
    /// Read the RLS descriptors from this xDS server instead of files:
    /// `RateLimitConfig` resources over ADS, state of the world (as Envoy
    /// Gateway serves its rate limit deployment). `http://host:port`, or
    /// `https://host:port` for TLS; a bare `host:port` is `http://`.
    /// Serves `--grpc-listen` and `--rlqs-listen` as `--descriptors` does.
    #[arg(
        long = "descriptors-xds",
        env = "SLUICE_DESCRIPTORS_XDS",
        conflicts_with = "descriptors",
        value_name = "URL"
    )]
    pub url: Option<String>,

    /// The node id the limiter subscribes as (the server answers by it).
    #[arg(
        long = "xds-node-id",
        env = "SLUICE_XDS_NODE_ID",
        default_value = "default",
        value_name = "ID"
    )]
    pub node_id: String,

    /// The node's cluster.
    #[arg(
        long = "xds-node-cluster",
        env = "SLUICE_XDS_NODE_CLUSTER",
        default_value = "",
        value_name = "NAME"
    )]
    pub node_cluster: String,

    /// The node's metadata: `key=value,key=value` (string values).
    #[arg(
        long = "xds-node-metadata",
        env = "SLUICE_XDS_NODE_METADATA",
        default_value = "",
        value_name = "K=V,..."
    )]
    pub node_metadata: String,

    /// gRPC metadata sent with the stream: `name=value,name=value`.
    #[arg(
        long = "xds-headers",
        env = "SLUICE_XDS_HEADERS",
        default_value = "",
        value_name = "K=V,..."
    )]
    pub headers: String,

    /// PEM CA certificates the server's certificate must chain to (with
    /// an `https://` URL; needed there).
    #[arg(long = "xds-ca", env = "SLUICE_XDS_CA", value_name = "PATH")]
    pub ca: Option<PathBuf>,

    /// Mutual TLS: PEM client certificate; needs `--xds-key`.
    #[arg(
        long = "xds-cert",
        env = "SLUICE_XDS_CERT",
        requires = "xds_key",
        value_name = "PATH"
    )]
    pub cert: Option<PathBuf>,

    /// PEM private key of `--xds-cert`.
    #[arg(
        long = "xds-key",
        env = "SLUICE_XDS_KEY",
        requires = "cert",
        id = "xds_key",
        value_name = "PATH"
    )]
    pub key: Option<PathBuf>,

    /// The name the server's certificate must carry (default: the URL's
    /// host).
    #[arg(
        long = "xds-server-name",
        env = "SLUICE_XDS_SERVER_NAME",
        value_name = "NAME"
    )]
    pub server_name: Option<String>,

    /// The delay before reconnecting after the stream ends, in ms; doubled
    /// at each failure in a row up to `--xds-backoff-max-ms`, jittered
    /// down to half.
    #[arg(
        long = "xds-backoff-initial-ms",
        env = "SLUICE_XDS_BACKOFF_INITIAL_MS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..)
    , value_name = "MS")]
    pub backoff_initial_ms: u64,

    /// The longest delay before reconnecting, in ms.
    #[arg(
        long = "xds-backoff-max-ms",
        env = "SLUICE_XDS_BACKOFF_MAX_MS",
        default_value_t = 60_000,
        value_parser = clap::value_parser!(u64).range(1..)
    , value_name = "MS")]
    pub backoff_max_ms: u64,

    /// The largest xDS response accepted, in bytes.
    #[arg(
        long = "xds-max-message-bytes",
        env = "SLUICE_XDS_MAX_MESSAGE_BYTES",
        default_value_t = 4 << 20,
        value_parser = clap::value_parser!(u64).range(1..=(1 << 30))
    , value_name = "BYTES")]
    pub max_message_bytes: u64,

    /// Open the listeners before the first configuration comes (RLS calls
    /// are answered `UNAVAILABLE`, RLQS reports with no assignment, until
    /// it does). Off: the limiter waits for it before listening.
    #[arg(long = "xds-start-empty", env = "SLUICE_XDS_START_EMPTY")]
    pub start_empty: bool,
}

impl XdsArgs {
    /// The source the flags name, when `--descriptors-xds` is given.
    pub fn source(&self) -> Result<Option<XdsSource>, String> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let url = if url.contains("://") {
            url.clone()
        } else {
            format!("http://{url}")
        };
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(format!(
                "--descriptors-xds {url}: expected http:// or https://"
            ));
        }
        let tls = XdsTls {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            server_name: self.server_name.clone(),
        };
        if url.starts_with("http://") && (tls.ca.is_some() || tls.cert.is_some()) {
            return Err(format!(
                "--xds-ca and --xds-cert need an https:// URL, got {url}"
            ));
        }
        for (flag, path) in [
            ("--xds-ca", &tls.ca),
            ("--xds-cert", &tls.cert),
            ("--xds-key", &tls.key),
        ] {
            if let Some(path) = path {
                std::fs::metadata(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
            }
        }
        let headers = pairs(&self.headers, '=').map_err(|e| format!("--xds-headers: {e}"))?;
        if let Some((k, v)) = headers.iter().find(|(k, v)| !metadata_ok(k, v)) {
            return Err(format!("--xds-headers: {k}={v} is not valid gRPC metadata"));
        }
        Ok(Some(XdsSource {
            url,
            node_id: self.node_id.clone(),
            node_cluster: self.node_cluster.clone(),
            node_metadata: pairs(&self.node_metadata, '=')
                .map_err(|e| format!("--xds-node-metadata: {e}"))?,
            headers,
            tls,
            backoff: Backoff {
                initial: Duration::from_millis(self.backoff_initial_ms),
                max: Duration::from_millis(self.backoff_max_ms.max(self.backoff_initial_ms)),
            },
            max_message_bytes: usize::try_from(self.max_message_bytes).unwrap_or(usize::MAX),
        }))
    }
}

/// Whether `name: value` can be sent as gRPC metadata (an ASCII header
/// name and value; `-bin` names carry binary values and are not taken).
fn metadata_ok(name: &str, value: &str) -> bool {
    !name.ends_with("-bin")
        && name
            .parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>()
            .is_ok()
        && value
            .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        /// What `--descriptors-xds` conflicts with.
        #[arg(long)]
        descriptors: Option<PathBuf>,
        #[command(flatten)]
        xds: XdsArgs,
    }

    fn source(args: &[&str]) -> Result<Option<XdsSource>, String> {
        let flags = Flags::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        flags.xds.source()
    }

    #[test]
    fn bad_settings_are_refused_at_start_naming_the_flag() {
        let url = "--descriptors-xds=127.0.0.1:18000";
        let plain = source(&[url]).unwrap().expect("a source");
        assert_eq!(plain.url, "http://127.0.0.1:18000");
        let e = source(&[url, "--xds-headers=x a=1"]).unwrap_err();
        assert!(e.starts_with("--xds-headers: x a=1"), "{e}");
        let e = source(&[
            "--descriptors-xds=https://h:1",
            "--xds-ca=/nonexistent/ca.pem",
        ])
        .unwrap_err();
        assert!(e.starts_with("--xds-ca /nonexistent/ca.pem: "), "{e}");
        let e = source(&[url, "--xds-ca=/etc/hostname"]).unwrap_err();
        assert!(e.contains("need an https:// URL"), "{e}");
        let e = source(&["--descriptors-xds=ftp://h:1"]).unwrap_err();
        assert!(e.contains("expected http:// or https://"), "{e}");
        assert!(source(&[]).unwrap().is_none());
    }
}
