//! What one connection saw, merged into the report at the end.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

/// How a request that was written ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An answer with this status, complete.
    Answered(u16),
    /// No complete answer within the deadline.
    Timeout,
    /// The connection failed after the request was written.
    Io,
}

/// Counts over one timeline bucket.
#[derive(Debug, Clone, Default)]
pub struct Bucket {
    status: BTreeMap<u16, u64>,
    timeouts: u64,
    errors: u64,
    max_us: u64,
}

/// One connection's (or, merged, the whole run's) record.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    status: BTreeMap<u16, u64>,
    timeouts: u64,
    io_errors: u64,
    connect_errors: u64,
    /// Latency of every answered request, microseconds.
    latencies_us: Vec<u32>,
    /// Latency of every request that was written, answered or not.
    max_us: u64,
    timeline: Vec<Bucket>,
}

impl Stats {
    /// Records a written request that ended `since_start` after the run began.
    pub fn record(
        &mut self,
        outcome: Outcome,
        latency: Duration,
        since_start: Duration,
        interval: Duration,
    ) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.max_us = self.max_us.max(us);
        let index = usize::try_from(since_start.as_nanos() / interval.as_nanos().max(1))
            .unwrap_or(usize::MAX);
        if index >= self.timeline.len() {
            // A run is minutes long at most: buckets are few.
            self.timeline
                .resize(index.saturating_add(1).min(1 << 20), Bucket::default());
        }
        let bucket = self.timeline.get_mut(index);
        match outcome {
            Outcome::Answered(code) => {
                *self.status.entry(code).or_default() += 1;
                self.latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
                if let Some(b) = bucket {
                    *b.status.entry(code).or_default() += 1;
                    b.max_us = b.max_us.max(us);
                }
            }
            Outcome::Timeout => {
                self.timeouts += 1;
                if let Some(b) = bucket {
                    b.timeouts += 1;
                    b.max_us = b.max_us.max(us);
                }
            }
            Outcome::Io => {
                self.io_errors += 1;
                if let Some(b) = bucket {
                    b.errors += 1;
                }
            }
        }
    }

    pub fn connect_failed(&mut self) {
        self.connect_errors += 1;
    }

    pub fn merge(&mut self, other: Stats) {
        for (code, n) in other.status {
            *self.status.entry(code).or_default() += n;
        }
        self.timeouts += other.timeouts;
        self.io_errors += other.io_errors;
        self.connect_errors += other.connect_errors;
        self.latencies_us.extend(other.latencies_us);
        self.max_us = self.max_us.max(other.max_us);
        if other.timeline.len() > self.timeline.len() {
            self.timeline
                .resize(other.timeline.len(), Bucket::default());
        }
        for (mine, theirs) in self.timeline.iter_mut().zip(other.timeline) {
            for (code, n) in theirs.status {
                *mine.status.entry(code).or_default() += n;
            }
            mine.timeouts += theirs.timeouts;
            mine.errors += theirs.errors;
            mine.max_us = mine.max_us.max(theirs.max_us);
        }
    }

    /// The report printed at the end (its fields are described in `docs/testing.md`).
    pub fn report(mut self, elapsed: Duration, interval: Duration) -> Value {
        self.latencies_us.sort_unstable();
        let answered = self.latencies_us.len() as u64;
        let sent = answered + self.timeouts + self.io_errors;
        let elapsed_s = elapsed.as_secs_f64();
        let timeline: Vec<Value> = self
            .timeline
            .iter()
            .enumerate()
            .map(|(i, b)| {
                json!({
                    "t": i as f64 * interval.as_secs_f64(),
                    "answered": b.status.values().sum::<u64>(),
                    "status": status_map(&b.status),
                    "timeouts": b.timeouts,
                    "errors": b.errors,
                    "max_us": b.max_us,
                })
            })
            .collect();
        json!({
            "sent": sent,
            "answered": answered,
            "status": status_map(&self.status),
            "timeouts": self.timeouts,
            "errors": {"connect": self.connect_errors, "io": self.io_errors},
            "elapsed_s": elapsed_s,
            "rate": if elapsed_s > 0.0 { answered as f64 / elapsed_s } else { 0.0 },
            "latency_us": {
                "p50": percentile(&self.latencies_us, 0.5),
                "p99": percentile(&self.latencies_us, 0.99),
                "p999": percentile(&self.latencies_us, 0.999),
                "max": self.max_us,
            },
            "timeline": timeline,
        })
    }
}

fn status_map(status: &BTreeMap<u16, u64>) -> Value {
    Value::Object(
        status
            .iter()
            .map(|(code, n)| (code.to_string(), json!(n)))
            .collect(),
    )
}

/// The `q` quantile of sorted values (nearest rank); 0 when there are none.
fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn counts_every_outcome_and_merges() {
        let mut a = Stats::default();
        a.record(
            Outcome::Answered(200),
            Duration::from_millis(2),
            Duration::from_millis(100),
            SEC,
        );
        a.record(
            Outcome::Answered(429),
            Duration::from_millis(4),
            Duration::from_millis(1500),
            SEC,
        );
        let mut b = Stats::default();
        b.record(
            Outcome::Timeout,
            Duration::from_secs(3),
            Duration::from_millis(2500),
            SEC,
        );
        b.record(
            Outcome::Io,
            Duration::from_millis(1),
            Duration::from_millis(200),
            SEC,
        );
        b.connect_failed();
        a.merge(b);
        let r = a.report(Duration::from_secs(3), SEC);
        assert_eq!(r["sent"], 4);
        assert_eq!(r["answered"], 2);
        assert_eq!(r["status"]["200"], 1);
        assert_eq!(r["status"]["429"], 1);
        assert_eq!(r["timeouts"], 1);
        assert_eq!(r["errors"]["connect"], 1);
        assert_eq!(r["errors"]["io"], 1);
        assert_eq!(r["latency_us"]["max"], 3_000_000);
        assert_eq!(r["latency_us"]["p50"], 2000);
        let timeline = r["timeline"].as_array().map(Vec::len);
        assert_eq!(timeline, Some(3));
        assert_eq!(r["timeline"][0]["answered"], 1);
        assert_eq!(r["timeline"][0]["errors"], 1);
        assert_eq!(r["timeline"][2]["timeouts"], 1);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u32> = (1..=1000).collect();
        assert_eq!(percentile(&v, 0.5), 500);
        assert_eq!(percentile(&v, 0.99), 990);
        assert_eq!(percentile(&v, 0.999), 999);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
