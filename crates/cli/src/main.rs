//! `sluice`: the filter's configuration checked offline, for GitOps pipelines
//! and editors.
//!
//! `sluice check-config FILE...` runs the very compiler the filter runs when
//! Envoy hands it its configuration ([`sluice_filter::config::parse`]) and prints
//! the same field-named errors; `sluice schema` prints the JSON Schema of the
//! configuration, generated from the same types.

use std::io::{Read, Write};
use std::process::ExitCode;

const USAGE: &str = "\
usage: sluice check-config FILE...   check filter configurations (JSON; `-` reads stdin)
                                     with the filter's own compiler; exit 1 if one is invalid
       sluice schema                 print the JSON Schema of the filter configuration
       sluice --version";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check-config") if args.len() > 1 => check_config(&args[1..]),
        Some("schema") if args.len() == 1 => {
            print(&sluice_filter::schema::schema_text());
            ExitCode::SUCCESS
        }
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
