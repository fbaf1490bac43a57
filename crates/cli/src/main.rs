//! `sluice`: the filter's configuration checked offline, for GitOps pipelines
//! and editors.
//!
//! `sluice check-config FILE...` runs the very compiler the filter runs when
//! Envoy hands it its configuration ([`sluice_filter::config::parse`]) and prints
//! the same field-named errors; `sluice schema` prints the JSON Schema of the
//! configuration, generated from the same types. `sluice limits`,
//! `sluice key` and `sluice top` read a limiter's introspection API
//! ([`limiter`]).

mod limiter;

use serde_json::Value;
use std::io::{Read, Write};
use std::process::ExitCode;

const USAGE: &str = "\
usage: sluice check-config FILE...   check filter configurations (JSON; `-` reads stdin)
                                     with the filter's own compiler; exit 1 if one is invalid
       sluice schema                 print the JSON Schema of the filter configuration
       sluice limits [--domain D]    the limits a limiter serves (its RLS descriptors)
       sluice key DOMAIN KEY --algorithm A --requests N --window-ms W [--burst B]
                 [--precision P] [--soft-percent S] [--block-ms B]
                                     a key's state in the limiter's store (consumes nothing)
       sluice key DOMAIN KEY --service rls
                                     an RLS counter's state, its limit from the descriptors
       sluice top DOMAIN [-n N]      the keys the limiter refused most, most refused first
         (limits, key, top: --limiter http(s)://host:port, default http://127.0.0.1:8081;
          https: --cacert FILE, and --cert FILE --key FILE for mutual TLS;
          --json prints the API's answer)
       sluice --version";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check-config") if args.len() > 1 => check_config(&args[1..]),
        Some("schema") if args.len() == 1 => {
            print(&sluice_filter::schema::schema_text());
            ExitCode::SUCCESS
        }
        Some(verb @ ("limits" | "key" | "top")) => match introspect(verb, &args[1..]) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sluice {verb}: {e}");
                ExitCode::from(2)
            }
        },
        Some("--version" | "-V") => {
            print(concat!("sluice ", env!("CARGO_PKG_VERSION"), "\n"));
            ExitCode::SUCCESS
        }
        Some("--help" | "-h" | "help") => {
            print(&format!("{USAGE}\n"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Checks each file; 0 when all are valid, 1 when one is not, 2 when one
/// cannot be read.
fn check_config(files: &[String]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for file in files {
        let bytes = match read(file) {
            Ok(bytes) => bytes,
            Err(e) => {
                eprintln!("{file}: cannot read: {e}");
                return ExitCode::from(2);
            }
        };
        match sluice_filter::config::parse(&bytes) {
            Ok(plan) => print(&format!(
                "{file}: ok (domain {}, {} rule{})\n",
                plan.domain,
                plan.rules.len(),
                if plan.rules.len() == 1 { "" } else { "s" }
            )),
            Err(e) => {
                // The filter logs `sluice: invalid configuration: {e}`.
                eprintln!("{file}: invalid configuration: {e}");
                code = ExitCode::from(1);
            }
        }
    }
    code
}

fn read(file: &str) -> std::io::Result<Vec<u8>> {
    if file == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes)?;
        Ok(bytes)
    } else {
        std::fs::read(file)
    }
}

/// Writes to stdout, ignoring a closed pipe (`sluice schema | head`).
fn print(text: &str) {
    let _ = std::io::stdout().write_all(text.as_bytes());
}

/// Runs an introspection verb: 0 when answered, 1 when the limiter
/// answered an error (printed), `Err` for bad arguments or no answer.
fn introspect(verb: &str, args: &[String]) -> Result<ExitCode, String> {
    let opts = limiter::options(args)?;
    let (answer, header, rows): (Value, &[&str], _) = match verb {
        "limits" => {
            let answer = all_limits(&opts)?;
            let rows = limiter::limits_rows(&answer);
            (
                answer,
                &["DOMAIN", "DESCRIPTORS", "NAME", "LIMIT", "MODE"],
                rows,
            )
        }
        "key" => {
            let answer = call(&opts, &key_path(&opts.rest)?)?;
            let rows = limiter::key_rows(&answer);
            let header: &[&str] = &[
                "ALGORITHM",
                "WINDOW_MS",
                "LIMIT",
                "REMAINING",
                "RESET_MS",
                "RETRY_AFTER_MS",
                "DEBT",
                "HELD",
                "BLOCKED_UNTIL_MS",
            ];
            (answer, header, rows)
        }
        _ => {
            let answer = call(&opts, &top_path(&opts.rest)?)?;
            let rows = limiter::top_rows(&answer);
            (answer, &["#", "KEY", "LIMIT", "REFUSALS", "ERROR"], rows)
        }
    };
    if answer.get("error").is_some() {
        eprintln!("sluice {verb}: {}", limiter::cell(&answer["error"]));
        return Ok(ExitCode::from(1));
    }
    if opts.json {
        print(&format!("{answer}\n"));
    } else {
        print(&limiter::table(header, &rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// One call: the answer, an error answer included (it has `error`).
fn call(opts: &limiter::Options, path: &str) -> Result<Value, String> {
    limiter::get(opts, path).map(|(_, v)| v)
}

/// Every page of `/v1/limits` as one answer.
fn all_limits(opts: &limiter::Options) -> Result<Value, String> {
    let mut base = String::from("/v1/limits?page_size=1000");
    match opts.rest.as_slice() {
        [] => {}
        [flag, d] if flag == "--domain" => {
            base.push_str(&format!("&domain={}", limiter::encode(d)))
        }
        _ => return Err("expected [--domain D]".into()),
    }
    let mut domains: Vec<Value> = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let path = match &token {
            Some(t) => format!("{base}&page_token={}", limiter::encode(t)),
            None => base.clone(),
        };
        let page = call(opts, &path)?;
        if page.get("error").is_some() {
            return Ok(page);
        }
        for d in page["domains"].as_array().into_iter().flatten() {
            match domains.last_mut() {
                Some(last) if last["domain"] == d["domain"] => {
                    if let (Some(to), Some(from)) =
                        (last["limits"].as_array_mut(), d["limits"].as_array())
                    {
                        to.extend(from.iter().cloned());
                    }
                }
                Some(_) | None => domains.push(d.clone()),
            }
        }
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    Ok(serde_json::json!({"domains": domains, "next_page_token": null}))
}

/// `/v1/keys?...` from `DOMAIN KEY --algorithm A ...`.
fn key_path(rest: &[String]) -> Result<String, String> {
    let [domain, key, flags @ ..] = rest else {
        return Err("expected DOMAIN KEY --algorithm A --requests N --window-ms W".into());
    };
    let mut path = format!(
        "/v1/keys?domain={}&key={}",
        limiter::encode(domain),
        limiter::encode(key)
    );
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let name = match flag.as_str() {
            "--algorithm" | "--requests" | "--window-ms" | "--burst" | "--precision"
            | "--soft-percent" | "--block-ms" | "--service" => flag[2..].replace('-', "_"),
            other => return Err(format!("{other}: unknown option")),
        };
        let value = it.next().ok_or_else(|| format!("{flag}: needs a value"))?;
        path.push_str(&format!("&{name}={}", limiter::encode(value)));
    }
    Ok(path)
}

/// `/v1/top?...` from `DOMAIN [-n N]`.
fn top_path(rest: &[String]) -> Result<String, String> {
    match rest {
        [domain] => Ok(format!("/v1/top?domain={}", limiter::encode(domain))),
        [domain, flag, n] if flag == "-n" || flag == "--n" => Ok(format!(
            "/v1/top?domain={}&n={}",
            limiter::encode(domain),
            limiter::encode(n)
        )),
        _ => Err("expected DOMAIN [-n N]".into()),
    }
}
