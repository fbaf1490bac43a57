//! `sluice limits`, `sluice key`, `sluice top`: the limiter's introspection
//! API (`sluice-limiter --introspection`) read over plain HTTP/1.1 and
//! printed as a table, or as the API's JSON with `--json`.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
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
    /// The verb's own words and `--name value` pairs, in order.
    pub rest: Vec<String>,
}

/// Reads `--limiter URL` and `--json` out of `args`.
pub fn options(args: &[String]) -> Result<Options, String> {
    let mut out = Options {
        limiter: DEFAULT_LIMITER.to_string(),
        json: false,
        rest: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => out.json = true,
            "--limiter" => {
                out.limiter = it.next().ok_or("--limiter: needs a URL")?.clone();
            }
            _ => out.rest.push(a.clone()),
        }
    }
    Ok(out)
}

/// `host:port` of an `http://host:port[/]` URL.
fn authority(url: &str) -> Result<&str, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("--limiter: expected http://host:port, got {url:?} (https is not spoken)")
    })?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') {
        return Err(format!("--limiter: expected http://host:port, got {url:?}"));
    }
    Ok(host)
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
pub fn get(limiter: &str, path: &str) -> Result<(u16, Value), String> {
    let host = authority(limiter)?;
    let mut stream = TcpStream::connect(host).map_err(|e| format!("{limiter}: {e}"))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{limiter}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
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
        assert!(authority("https://h:1").is_err());
        assert_eq!(authority("http://h:1/").unwrap(), "h:1");
    }

    #[test]
    fn rows_come_from_the_answers() {
        let top = json!({"domain": "d", "keys": [{"key": "a", "limit": "gcra|1000", "refusals": 9, "error": 1}]});
        assert_eq!(top_rows(&top), vec![vec!["1", "a", "gcra|1000", "9", "1"]]);
        let key = json!({"limits": [{"algorithm": "gcra", "window_ms": 1000, "limit": 5, "remaining": 2, "reset_ms": 600}]});
        assert_eq!(
            key_rows(&key),
            vec![vec!["gcra", "1000", "5", "2", "600", "-", "-", "-"]]
        );
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
