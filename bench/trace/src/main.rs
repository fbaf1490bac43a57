//! Runs one bursty arrival trace through each of Sluice's six algorithms with
//! the same limit and prints, for every arrival, whether it was admitted:
//!
//! ```text
//! t_ms,algorithm,admitted
//! 0,token_bucket,1
//! ```
//!
//! The first lines, starting with `#`, give the limit (`# limit,10,10000` for
//! 10 requests per 10 000 ms). Decisions come from `sluice-core` itself, with
//! a simulated clock, so the chart shows what the filter and the limiter do.

mod trace;

use sluice_core::{decide, Algorithm, Encoded, Limit, Nanos, MILLISECOND, SECOND};
use std::io::{self, Write};
use std::process::ExitCode;

/// Requests per window of the limit every algorithm is given.
const REQUESTS: u64 = 10;
/// The window: long enough that its boundaries are visible on the chart.
const WINDOW: Nanos = 10 * SECOND;
/// Trace start: a whole number of windows since the epoch, so that fixed
/// windows start at t = 0, 10 s, 20 s, ... on the chart.
const T0: Nanos = 1_700_000_000 * SECOND;

fn main() -> ExitCode {
    match run(&mut io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-bench-trace: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(out: &mut impl Write) -> Result<(), String> {
    let arrivals = trace::arrivals();
    writeln!(out, "# limit,{REQUESTS},{}", WINDOW / MILLISECOND).map_err(|e| e.to_string())?;
    writeln!(out, "t_ms,algorithm,admitted").map_err(|e| e.to_string())?;
    for algorithm in Algorithm::ALL {
        let limit = Limit::new(algorithm, REQUESTS, WINDOW).map_err(|e| e.to_string())?;
        let mut state: Option<Encoded> = None;
        for &t in &arrivals {
            let now = T0.saturating_add(t);
            let outcome = decide(&limit, state.as_ref().map(Encoded::as_bytes), now, 1);
            if outcome.new_state.is_some() {
                state = outcome.new_state;
            }
            writeln!(
                out,
                "{},{},{}",
                t / MILLISECOND,
                algorithm.name(),
                u8::from(outcome.decision.allowed)
            )
            .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
