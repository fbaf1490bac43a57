//! `sluice limits`, `sluice key`, `sluice top`: the limiter's introspection
//! API (`sluice-limiter --introspection`) read over HTTP/1.1, or HTTPS
//! with the limiter's TLS and mutual TLS, and printed as a table, or as
//! the API's JSON with `--json`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The limiter asked unless `--limiter` says.
pub const DEFAULT_LIMITER: &str = "http://127.0.0.1:8081";

/// How long a call may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a verb was given.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// `--limiter URL`: `http://host:port`.
    pub limiter: String,
    /// `--json`: print the API's answer as is.
    pub json: bool,
    /// `--cacert FILE`: the CA certificates an `https://` limiter's
    /// certificate must chain to.
    pub cacert: Option<PathBuf>,
    /// `--cert FILE` and `--key FILE`: the client certificate of mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
    /// The verb's own words and `--name value` pairs, in order.
    pub rest: Vec<String>,
}

/// Reads `--limiter URL` and `--json` out of `args`.
pub fn options(args: &[String]) -> Result<Options, String> {
    let mut out = Options {
        limiter: DEFAULT_LIMITER.to_string(),
        json: false,
        cacert: None,
        client: None,
        rest: Vec::new(),
    };
    let (mut cert, mut key) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or(format!("{flag}: needs a value"));
        match a.as_str() {
            "--json" => out.json = true,
            "--limiter" => out.limiter = value("--limiter")?,
            "--cacert" => out.cacert = Some(value("--cacert")?.into()),
            "--cert" => cert = Some(PathBuf::from(value("--cert")?)),
            "--key" => key = Some(PathBuf::from(value("--key")?)),
            _ => out.rest.push(a.clone()),
        }
    }
    out.client = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => return Err("--cert and --key go together".into()),
    };
    Ok(out)
}

/// `host:port` of an `http://host:port[/]` or `https://host:port[/]`
/// URL, and whether it is HTTPS.
fn authority(url: &str) -> Result<(&str, bool), String> {
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        (None, None) => {
            return Err(format!(
                "--limiter: expected http(s)://host:port, got {url:?}"
            ))
        }
    };
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') {
        return Err(format!(
            "--limiter: expected http(s)://host:port, got {url:?}"
        ));
    }
    Ok((host, tls))
}

/// The TLS client of `opts` for `host` (`host:port`) over `tcp`: the
/// certificate checked against `--cacert`, `--cert`/`--key` sent when given.
fn tls_stream(
    opts: &Options,
    host: &str,
    tcp: TcpStream,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let ca = opts
        .cacert
        .as_ref()
        .ok_or("--cacert FILE: needed for an https:// limiter")?;
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca).map_err(|e| format!("--cacert: {e}"))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("--cacert: {e}"))?;
        roots.add(cert).map_err(|e| format!("--cacert: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match &opts.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--cert: {e}"))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("--cert: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let server = ServerName::try_from(name.trim_matches(['[', ']']).to_string())
        .map_err(|e| format!("--limiter: {e}"))?;
    let conn = rustls::ClientConnection::new(Arc::new(config), server)
        .map_err(|e| format!("--limiter: {e}"))?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// Sends `request` and reads the answer until the peer closes (a TLS peer
/// closing without `close_notify` after answering ends it too).
fn exchange<S: Read + Write>(mut stream: S, request: &str) -> std::io::Result<Vec<u8>> {
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => Ok(raw),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e),
    }
}

/// Percent-encodes a query value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET path` on the limiter: the status and the body read as JSON.
pub fn get(opts: &Options, path: &str) -> Result<(u16, Value), String> {
    let limiter = opts.limiter.as_str();
    let (host, tls) = authority(limiter)?;
    let stream = TcpStream::connect(host).map_err(|e| format!("{limiter}: {e}"))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    let raw = match tls {
        true => exchange(tls_stream(opts, host, stream)?, &request),
        false => exchange(stream, &request),
    }
    .map_err(|e| format!("{limiter}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{limiter}: not an HTTP answer"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("{limiter}: not an HTTP answer"))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    let value = serde_json::from_str(&body)
        .map_err(|_| format!("{limiter}{path}: answered {status}: {}", body.trim()))?;
    Ok((status, value))
}

/// The payload of a chunked body.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Rows printed under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A JSON value as a table cell: strings bare, absent as `-`.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The rows of a `/v1/limits` answer.
pub fn limits_rows(page: &Value) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for d in page["domains"].as_array().into_iter().flatten() {
        for l in d["limits"].as_array().into_iter().flatten() {
            let descriptors: Vec<String> = l["descriptors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| match e["value"].as_str() {
                    Some(v) => format!("{}={v}", cell(&e["key"])),
                    None => cell(&e["key"]),
                })
                .collect();
            let limit = if l["unlimited"] == Value::Bool(true) {
                "unlimited".to_string()
            } else {
                format!("{}/{}", cell(&l["requests_per_unit"]), cell(&l["unit"]))
            };
            let shadow = if l["shadow_mode"] == Value::Bool(true) {
                "shadow"
            } else {
                ""
            };
            rows.push(vec![
                cell(&d["domain"]),
                descriptors.join(" "),
                cell(&l["name"]),
                limit,
                shadow.to_string(),
            ]);
        }
    }
    rows
}

/// The rows of a `/v1/keys` answer.
pub fn key_rows(answer: &Value) -> Vec<Vec<String>> {
    let fields = [
        "algorithm",
        "window_ms",
        "limit",
        "remaining",
        "reset_ms",
        "retry_after_ms",
        "debt",
        "held",
        "blocked_until_ms",
    ];
    answer["limits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| fields.iter().map(|f| cell(&l[*f])).collect())
        .collect()
}

/// The rows of a `/v1/top` answer, numbered from 1.
pub fn top_rows(answer: &Value) -> Vec<Vec<String>> {
    answer["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, k)| {
            vec![
                (i + 1).to_string(),
                cell(&k["key"]),
                cell(&k["limit"]),
                cell(&k["refusals"]),
                cell(&k["error"]),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_table_pads_each_column_to_its_widest_cell() {
        let rows = vec![vec!["abc".to_string(), "1".to_string()]];
        assert_eq!(table(&["K", "REFUSALS"], &rows), "K    REFUSALS\nabc  1\n");
    }

    #[test]
    fn options_are_read_wherever_they_stand() {
        let args: Vec<String> = ["d", "--json", "--limiter", "http://h:1", "k"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = options(&args).unwrap();
        assert_eq!(o.limiter, "http://h:1");
        assert!(o.json);
        assert_eq!(o.rest, vec!["d".to_string(), "k".to_string()]);
        assert_eq!(authority("https://h:1").unwrap(), ("h:1", true));
        assert_eq!(authority("http://h:1/").unwrap(), ("h:1", false));
        assert!(authority("ftp://h:1").is_err());
    }

    #[test]
    fn rows_come_from_the_answers() {
        let top = json!({"domain": "d", "keys": [{"key": "a", "limit": "gcra|1000", "refusals": 9, "error": 1}]});
        assert_eq!(top_rows(&top), vec![vec!["1", "a", "gcra|1000", "9", "1"]]);
        let key = json!({"limits": [{"algorithm": "gcra", "window_ms": 1000, "limit": 5, "remaining": 0, "reset_ms": 600, "debt": 3}]});
        assert_eq!(
            key_rows(&key),
            vec![vec!["gcra", "1000", "5", "0", "600", "-", "3", "-", "-"]]
        );
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
