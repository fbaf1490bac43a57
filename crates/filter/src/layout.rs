//! The shared-data key layout.
//!
//! Keys derive only from stable names (domain, rule name, limit index,
//! algorithm, window), so a new configuration with the same rule and limit
//! shape finds the counters of the previous one:
//!
//! | key | value |
//! | --- | --- |
//! | `sluice/<domain>/seed` | 16-byte slot-hashing seed |
//! | `sluice/<domain>/<rule>/<limit>/<algorithm>/<window ms>/b<bucket>` | a bucket of a local limit's key table: the states of up to 8 keys ([`crate::table`]) |
//! | `sluice/<domain>/<rule>/<limit>/<algorithm>/<window ms>/=<key>` | local limit state of an override key |
//! | `sluice/<domain>/<rule>/<limit>/deny/<slot>` | over-limit cache of a global limit |
//! | `sluice/<domain>/<rule>+elastic/<limit>/<algorithm>/<window ms>/b<bucket>` | extra allowance of a local elastic limit: a key table's bucket |
//! | `sluice/<domain>/<rule>/<limit>/lease/<slot>` | lease of a leased global limit |
//! | `sluice/<domain>/<rule>/<limit>/permits/b<bucket>` | permits of a local concurrency limit: a key table's bucket (each key's entry lists its holders) |
//! | `sluice/<domain>/holders` | the number of the last configuration loaded (each is a permit holder) |

use crate::decimal::push_u64;
use sluice_core::{Limit, MILLISECOND};

/// The key of the domain's slot-hashing seed.
pub fn seed_key(domain: &str) -> String {
    format!("sluice/{domain}/seed")
}

/// The prefix of a local limit's slot keys (the slot number follows).
pub fn limit_prefix(domain: &str, rule: &str, index: usize, limit: &Limit) -> String {
    format!(
        "sluice/{domain}/{rule}/{index}/{}/{}/",
        limit.algorithm.name(),
        limit.window / MILLISECOND
    )
}

/// The name under which an elastic limit of `rule` keeps its extra
/// allowance, locally and in the limiter: `<rule>+elastic` (`+` cannot
/// appear in a rule name, so it names no other rule's state).
pub fn elastic_label(rule: &str) -> String {
    format!("{rule}+elastic")
}

/// The dedicated key of an override's state.
pub fn override_key(domain: &str, rule: &str, index: usize, limit: &Limit, key: &str) -> String {
    let mut out = limit_prefix(domain, rule, index, limit);
    out.push('=');
    out.push_str(key);
    out
}

/// The prefix of a global limit's over-limit cache keys (the slot number follows).
pub fn deny_prefix(domain: &str, rule: &str, index: usize) -> String {
    format!("sluice/{domain}/{rule}/{index}/deny/")
}

/// The prefix of a local limit's block table (`on_exceed: block`; the
/// bucket number follows).
pub fn block_prefix(domain: &str, rule: &str, index: usize) -> String {
    format!("sluice/{domain}/{rule}/{index}/block/")
}

/// The prefix of a leased global limit's lease slots (the slot number follows).
pub fn lease_prefix(domain: &str, rule: &str, index: usize) -> String {
    format!("sluice/{domain}/{rule}/{index}/lease/")
}

/// The prefix of a local concurrency limit's permit slots (the slot number
/// follows).
pub fn permits_prefix(domain: &str, rule: &str, index: usize) -> String {
    format!("sluice/{domain}/{rule}/{index}/permits/")
}

/// The key of a rule's top limited keys (`top_limited_keys`).
pub fn top_keys_key(domain: &str, rule: &str) -> String {
    format!("sluice/{domain}/{rule}/top")
}

/// The key of the counter that numbers the configurations loaded in this
/// Envoy for `domain`: each takes the next number as its permit holder.
pub fn holders_key(domain: &str) -> String {
    format!("sluice/{domain}/holders")
}

/// Writes the key of bucket `bucket` of the key table under `prefix` into
/// `out`, reusing its allocation.
pub fn bucket_key(out: &mut String, prefix: &str, bucket: u64) {
    out.clear();
    out.push_str(prefix);
    out.push('b');
    push_u64(out, bucket);
}

/// Writes `prefix` followed by `slot` into `out`, reusing its allocation.
pub fn slot_key(out: &mut String, prefix: &str, slot: u64) {
    out.clear();
    out.push_str(prefix);
    push_u64(out, slot);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Algorithm, SECOND};

    fn limit() -> Limit {
        Limit {
            algorithm: Algorithm::Gcra,
            requests: 100,
            window: 60 * SECOND,
            burst: 20,
            precision: 1,
            soft_percent: 0,
            max_delay: None,
        }
    }

    #[test]
    fn keys_are_stable_names() {
        assert_eq!(seed_key("demo"), "sluice/demo/seed");
        assert_eq!(
            limit_prefix("demo", "per-ip", 0, &limit()),
            "sluice/demo/per-ip/0/gcra/60000/"
        );
        assert_eq!(
            override_key("demo", "per-ip", 1, &limit(), "203.0.113.7"),
            "sluice/demo/per-ip/1/gcra/60000/=203.0.113.7"
        );
        assert_eq!(deny_prefix("demo", "r", 2), "sluice/demo/r/2/deny/");
        let mut out = String::from("junk");
        slot_key(&mut out, "p/", 42);
        assert_eq!(out, "p/42");
    }
}
