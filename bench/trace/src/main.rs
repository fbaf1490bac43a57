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
//!
//! With the argument `shaping`, it runs the same trace through one GCRA limit
//! four ways instead (plain reject, a soft limit, delay mode, an elastic
//! limit) and prints, for every arrival, what happened and when it was
//! served:
//!
//! ```text
//! # limit,10,10000
//! # soft_percent,50
//! # max_delay_ms,2000
//! # ceiling,20
//! # pool,12,60000
//! t_ms,mode,outcome,served_ms
//! 9500,delay,delayed,10500
//! ```
//!
//! `outcome` is `admitted`, `delayed` (held until `served_ms`, when the
//! filter resumes it), `borrowed` (admitted beyond the quota from the
//! elastic limit's pool) or `denied` (`served_ms` empty).

mod trace;

use sluice_core::{
    decide, decide_all, Algorithm, Check, Encoded, Limit, Nanos, MILLISECOND, SECOND,
};
use std::io::{self, Write};
use std::process::ExitCode;

/// Requests per window of the limit every algorithm is given.
const REQUESTS: u64 = 10;
/// The window: long enough that its boundaries are visible on the chart.
const WINDOW: Nanos = 10 * SECOND;
/// The soft limit's allowance above the quota, in percent.
const SOFT_PERCENT: u32 = 50;
/// Delay mode's longest hold.
const MAX_DELAY: Nanos = 2 * SECOND;
/// The elastic limit's ceiling per window.
const CEILING: u64 = 20;
/// The elastic limit's pool: this many requests lent per `POOL_WINDOW`
/// (fixed window), spent within the trace's first minute.
const POOL: u64 = 12;
const POOL_WINDOW: Nanos = 60 * SECOND;
/// Trace start: a whole number of windows since the epoch, so that fixed
/// windows start at t = 0, 10 s, 20 s, ... on the chart.
const T0: Nanos = 1_700_000_000 * SECOND;

fn main() -> ExitCode {
    let shaping = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("shaping") => true,
        Some(other) => {
            eprintln!(
                "sluice-bench-trace: unknown argument {other:?} (expected none or `shaping`)"
            );
            return ExitCode::FAILURE;
        }
    };
    let out = &mut io::stdout().lock();
    let result = if shaping { run_shaping(out) } else { run(out) };
    match result {
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

/// What one arrival got in one mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// Passed at once.
    Admitted,
    /// Held, then passed at this time.
    Delayed(Nanos),
    /// Passed at once beyond the quota, borrowing from the pool.
    Borrowed,
    /// Refused.
    Denied,
}

/// Runs `arrivals` through `limit` with a simulated clock.
fn shape(limit: &Limit, arrivals: &[Nanos]) -> Vec<Served> {
    let mut state: Option<Encoded> = None;
    arrivals
        .iter()
        .map(|&t| {
            let outcome = decide(
                limit,
                state.as_ref().map(Encoded::as_bytes),
                T0.saturating_add(t),
                1,
            );
            if outcome.new_state.is_some() {
                state = outcome.new_state;
            }
            let d = outcome.decision;
            match (d.allowed, d.delay) {
                (false, _) => Served::Denied,
                (true, 0) => Served::Admitted,
                (true, delay) => Served::Delayed(t.saturating_add(delay)),
            }
        })
        .collect()
}

/// Runs `arrivals` through an elastic limit as the filter decides it: its
/// own limit, or else the extra allowance and the pool together.
fn shape_elastic(own: &Limit, extra: &Limit, pool: &Limit, arrivals: &[Nanos]) -> Vec<Served> {
    let mut states: [Option<Encoded>; 3] = [None, None, None];
    let bytes = |s: &Option<Encoded>| s.as_ref().map(|e| e.as_bytes().to_vec());
    arrivals
        .iter()
        .map(|&t| {
            let now = T0.saturating_add(t);
            let [own_state, extra_state, pool_state] = &mut states;
            let outcome = decide(own, own_state.as_ref().map(Encoded::as_bytes), now, 1);
            if outcome.new_state.is_some() {
                *own_state = outcome.new_state;
            }
            if outcome.decision.allowed {
                return Served::Admitted;
            }
            let (e, p) = (bytes(extra_state), bytes(pool_state));
            let checks = [
                Check::new(extra, e.as_deref(), 1),
                Check::new(pool, p.as_deref(), 1),
            ];
            let both = decide_all(&checks, now);
            for (state, new) in [extra_state, pool_state].into_iter().zip(both.new_states) {
                if new.is_some() {
                    *state = new;
                }
            }
            if both.allowed {
                Served::Borrowed
            } else {
                Served::Denied
            }
        })
        .collect()
}

/// The elastic limit of the chart: the plain limit, its extra allowance up to
/// `CEILING`, and the pool.
fn elastic_parts() -> Result<(Limit, Limit, Limit), String> {
    let own = Limit::new(Algorithm::Gcra, REQUESTS, WINDOW).map_err(|e| e.to_string())?;
    let extra =
        Limit::new(Algorithm::Gcra, CEILING - REQUESTS, WINDOW).map_err(|e| e.to_string())?;
    let pool = Limit::new(Algorithm::FixedWindow, POOL, POOL_WINDOW).map_err(|e| e.to_string())?;
    Ok((own, extra, pool))
}

/// The three ways the shaping chart compares beside elastic, each a GCRA
/// limit of `REQUESTS` per `WINDOW`.
fn shaping_modes() -> Result<[(&'static str, Limit); 3], String> {
    let plain = Limit::new(Algorithm::Gcra, REQUESTS, WINDOW).map_err(|e| e.to_string())?;
    let soft = plain.clone().with_soft_percent(SOFT_PERCENT);
    let delay = plain.clone().with_max_delay(Some(MAX_DELAY));
    for limit in [&soft, &delay] {
        limit.validate().map_err(|e| e.to_string())?;
    }
    Ok([("reject", plain), ("soft", soft), ("delay", delay)])
}

fn run_shaping(out: &mut impl Write) -> Result<(), String> {
    let arrivals = trace::arrivals();
    let w = |out: &mut dyn Write, line: String| writeln!(out, "{line}").map_err(|e| e.to_string());
    w(out, format!("# limit,{REQUESTS},{}", WINDOW / MILLISECOND))?;
    w(out, format!("# soft_percent,{SOFT_PERCENT}"))?;
    w(out, format!("# max_delay_ms,{}", MAX_DELAY / MILLISECOND))?;
    w(out, format!("# ceiling,{CEILING}"))?;
    w(out, format!("# pool,{POOL},{}", POOL_WINDOW / MILLISECOND))?;
    w(out, "t_ms,mode,outcome,served_ms".to_string())?;
    let mut modes: Vec<(&str, Vec<Served>)> = shaping_modes()?
        .into_iter()
        .map(|(mode, limit)| (mode, shape(&limit, &arrivals)))
        .collect();
    let (own, extra, pool) = elastic_parts()?;
    modes.push(("elastic", shape_elastic(&own, &extra, &pool, &arrivals)));
    for (mode, served) in modes {
        for (&t, served) in arrivals.iter().zip(served) {
            let (outcome, at) = match served {
                Served::Admitted => ("admitted", (t / MILLISECOND).to_string()),
                Served::Borrowed => ("borrowed", (t / MILLISECOND).to_string()),
                Served::Delayed(at) => ("delayed", at.div_ceil(MILLISECOND).to_string()),
                Served::Denied => ("denied", String::new()),
            };
            w(out, format!("{},{mode},{outcome},{at}", t / MILLISECOND))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(served: &[Served]) -> (usize, usize, usize) {
        let admitted = served.iter().filter(|s| **s == Served::Admitted).count();
        let delayed = served
            .iter()
            .filter(|s| matches!(s, Served::Delayed(_)))
            .count();
        (admitted, delayed, served.len() - admitted - delayed)
    }

    #[test]
    fn a_fresh_burst_gets_the_burst_then_the_soft_allowance_then_the_delay_budget() {
        let burst: Vec<Nanos> = vec![0; 20];
        let [(_, plain), (_, soft), (_, delay)] = shaping_modes().unwrap();
        assert_eq!(counts(&shape(&plain, &burst)), (10, 0, 10));
        assert_eq!(counts(&shape(&soft, &burst)), (15, 0, 5));
        // one request per second conforms; 2 s of delay holds two more
        let served = shape(&delay, &burst);
        assert_eq!(counts(&served), (10, 2, 8));
        assert_eq!(served[10], Served::Delayed(SECOND));
        assert_eq!(served[11], Served::Delayed(2 * SECOND));
    }

    #[test]
    fn an_elastic_limit_borrows_up_to_its_ceiling_until_the_pool_is_spent() {
        let (own, extra, pool) = elastic_parts().unwrap();
        // A fresh burst: the quota, then the extra allowance up to the ceiling.
        let served = shape_elastic(&own, &extra, &pool, &[0; 30]);
        let borrowed = served.iter().filter(|s| **s == Served::Borrowed).count();
        assert_eq!((counts(&served).0, borrowed), (10, 10));
        // Over the trace the pool lends exactly its size within its window.
        let arrivals = trace::arrivals();
        let served = shape_elastic(&own, &extra, &pool, &arrivals);
        let borrowed = arrivals
            .iter()
            .zip(&served)
            .filter(|(&t, s)| **s == Served::Borrowed && t < POOL_WINDOW)
            .count();
        assert_eq!(borrowed as u64, POOL);
    }

    #[test]
    fn delayed_arrivals_are_served_in_order_within_max_delay() {
        let arrivals = trace::arrivals();
        let [_, _, (_, delay)] = shaping_modes().unwrap();
        let mut last = 0;
        for (&t, served) in arrivals.iter().zip(shape(&delay, &arrivals)) {
            if let Served::Delayed(at) = served {
                assert!(at > t && at - t <= MAX_DELAY, "arrival {t} served at {at}");
                assert!(at >= last, "served out of order: {at} after {last}");
                last = at;
            }
        }
        assert!(last > 0, "the trace delays nothing");
    }
}
