//! `CONFIG_TYPE=GRPC_XDS_SOTW`: the peer's xDS configuration source, read
//! as `--descriptors-xds` and its flags.

use super::{Env, Translated};
use sluice_core::parse_duration;

/// The variables that name the xDS server and the node, as flags.
pub(super) fn xds(env: &Env<'_>, out: &mut Translated) -> Result<(), String> {
    let server = env.or("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000");
    let scheme = if env.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)? {
        "https"
    } else {
        "http"
    };
    out.args
        .extend(["--descriptors-xds".into(), format!("{scheme}://{server}")]);
    out.args.extend([
        "--xds-node-id".into(),
        env.or("CONFIG_GRPC_XDS_NODE_ID", "default"),
    ]);
    let copied = [
        ("CONFIG_GRPC_XDS_NODE_METADATA", "--xds-node-metadata"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "--xds-cert"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "--xds-key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "--xds-ca"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "--xds-server-name"),
        (
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            "--xds-max-message-bytes",
        ),
    ];
    for (name, flag) in copied {
        if let Some(value) = env.value(name) {
            out.args.extend([flag.into(), value]);
        }
    }
    if let Some(headers) = env.value("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
        out.args
            .extend(["--xds-headers".into(), headers_of(&headers)?]);
    }
    let delays = [
        (
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            "--xds-backoff-initial-ms",
        ),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "--xds-backoff-max-ms"),
    ];
    for (name, flag) in delays {
        if let Some(text) = env.value(name) {
            let ns = parse_duration(&text).map_err(|e| format!("{name}: {e}"))?;
            let ms = ns.div_ceil(sluice_core::MILLISECOND).max(1);
            out.args.extend([flag.into(), ms.to_string()]);
        }
    }
    if env.flag("FORCE_START_WITHOUT_INITIAL_CONFIG", false)? {
        out.args.push("--xds-start-empty".into());
    }
    Ok(())
}

/// The peer's map of headers (`name:value,name:value`, as its settings
/// library reads a map) in the flag's form (`name=value,...`).
fn headers_of(text: &str) -> Result<String, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once(':') {
            Some((k, v)) if !k.trim().is_empty() => Ok(format!("{}={}", k.trim(), v.trim())),
            _ => Err(format!(
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: {p:?}: expected name:value"
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|h| h.join(","))
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;

    fn args(vars: &[(&str, &str)]) -> Result<String, String> {
        run(vars).map(|t| t.args.join(" "))
    }

    /// Envoy Gateway's ratelimit deployment as it runs
    /// (`testdata/deployments/default.yaml`): the configuration from its
    /// xDS server over mutual TLS.
    #[test]
    fn envoy_gateways_xds_environment() {
        let args = args(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.redis.svc:6379"),
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ])
        .unwrap();
        assert!(
            args.contains(
                "--descriptors-xds https://envoy-gateway:18001 --xds-node-id envoy-ratelimit \
                 --xds-cert /certs/tls.crt --xds-key /certs/tls.key --xds-ca /certs/ca.crt \
                 --xds-start-empty"
            ),
            "{args}"
        );
        assert!(!args.contains("--descriptors "), "{args}");
    }

    #[test]
    fn the_peers_defaults_headers_and_delays() {
        let base = [
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "r:6379"),
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ];
        let plain = args(&base).unwrap();
        assert!(
            plain.contains("--descriptors-xds http://localhost:18000 --xds-node-id default"),
            "{plain}"
        );
        let mut vars = base.to_vec();
        vars.extend([
            (
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                "x-a:1, x-b:two",
            ),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "250ms"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1m"),
            ("MERGE_DOMAIN_CONFIG", "true"),
        ]);
        let full = args(&vars).unwrap();
        for part in [
            "--xds-node-metadata zone=a",
            "--xds-headers x-a=1,x-b=two",
            "--xds-backoff-initial-ms 250 --xds-backoff-max-ms 60000",
            "--merge-domains",
        ] {
            assert!(full.contains(part), "{part} in {full}");
        }
        vars.push(("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-a"));
        let e = args(
            &vars[..3]
                .iter()
                .chain(&vars[8..])
                .copied()
                .collect::<Vec<_>>(),
        );
        assert!(e.unwrap_err().contains("expected name:value"));
    }
}
