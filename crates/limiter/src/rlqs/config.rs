//! Which limit a bucket gets: its `BucketId` read as a descriptor of the
//! RLS configuration (`--descriptors`).
//!
//! The stream's `domain` (the filter's `domain` field) is the descriptor
//! domain; the bucket's keys and values, **sorted by key** (a `BucketId` is
//! an unordered map), are the descriptor's entries, matched by the same
//! rules as a `ShouldRateLimit` descriptor. The counter is the one an RLS
//! descriptor with those entries in that order uses, so both protocols may
//! share a limit. A bucket that matches nothing is [`Quota::Unconfigured`].

use crate::rls::config::{Action, Descriptors};
use crate::rls::rls_scope;
use crate::store::state_id;
use sluice_core::Limit;
use std::collections::HashMap;

/// What the configuration says about a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quota {
    /// No descriptor matches (or the domain is not configured): every
    /// request is admitted, nothing is counted.
    Unconfigured,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`: every request is denied.
    Blocked,
    /// A limit counted in the store.
    Limited {
        /// The limit's state identity.
        id: String,
        /// The limit.
        limit: Limit,
        /// `shadow_mode`: counted, never denied.
        shadow: bool,
    },
}

/// The quota of the bucket `bucket` in `domain`.
pub fn quota_for(config: &Descriptors, domain: &str, bucket: &HashMap<String, String>) -> Quota {
    let Some(dom) = config.domains.get(domain) else {
        return Quota::Unconfigured;
    };
    let mut entries: Vec<(&str, &str)> = bucket
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    entries.sort_unstable();
    let Some(found) = dom.lookup(entries.into_iter()) else {
        return Quota::Unconfigured;
    };
    match &found.rate_limit.action {
        Action::Unlimited => Quota::Unlimited,
        Action::Block => Quota::Blocked,
        Action::Limit(limit) => Quota::Limited {
            id: state_id(&rls_scope(domain), &found.key, limit),
            limit: limit.clone(),
            shadow: found.node.shadow,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        value: /free
        rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
";

    fn bucket(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn entries_are_matched_in_key_order() {
        let config = Descriptors::parse(CONFIG).unwrap();
        let q = quota_for(&config, "api", &bucket(&[("tenant", "a")]));
        let Quota::Limited { id, limit, shadow } = q else {
            panic!("{q:?}")
        };
        assert_eq!(limit.requests, 10);
        assert!(!shadow);
        assert!(id.starts_with("rls:api/tenant=a|"), "{id}");
        // `path` sorts before `tenant`: no descriptor starts with `path`.
        let nested = bucket(&[("tenant", "a"), ("path", "/free")]);
        assert_eq!(quota_for(&config, "api", &nested), Quota::Unconfigured);
    }

    #[test]
    fn unlimited_blocked_and_unknown() {
        let config = Descriptors::parse(CONFIG).unwrap();
        let banned = bucket(&[("banned", "x")]);
        assert_eq!(quota_for(&config, "api", &banned), Quota::Blocked);
        assert_eq!(quota_for(&config, "other", &banned), Quota::Unconfigured);
        assert_eq!(
            quota_for(&config, "api", &bucket(&[("nope", "x")])),
            Quota::Unconfigured
        );
        assert_eq!(quota_for(&config, "api", &bucket(&[])), Quota::Unconfigured);
    }
}
