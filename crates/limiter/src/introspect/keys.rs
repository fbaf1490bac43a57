//! `GET /v1/keys`: which state a query names, and reading it with a
//! request of weight 0.
//!
//! A key of the HTTP API comes with its limit in the query (the store keeps
//! no limit's count; Redis cannot list a key's limits without a scan). A
//! key of an RLS domain (`service=rls`) is the counter's key as `/v1/top`
//! shows it (`key=value/key=value`, escaped), and the descriptors in force
//! give its limit.
//!
//! A read carries the limit's penalty box: a check of weight 0 reports a
//! block in force and never starts one.

use super::query::Query;
use crate::rls::config::{Action, Descriptors};
use crate::rls::rls_scope;
use crate::store::{permits_id, state_id, PermitItem, RateItem, Store, StoreError, StoreItem};
use sluice_core::{Decision, MILLISECOND};
use sluice_wire::{parse_check, Rule, ValidCheck};

/// The parameters naming an HTTP API key's limit: a limit's fields as a
/// check names them.
pub(super) const LIMIT_FIELDS: [&str; 7] = [
    "algorithm",
    "requests",
    "window_ms",
    "burst",
    "precision",
    "soft_percent",
    "block_ms",
];

/// The state a query names.
#[derive(Debug)]
pub(super) struct Target {
    /// The item read, at weight 0.
    pub(super) item: StoreItem,
    /// The algorithm's name (`concurrency` for permits).
    pub(super) algorithm: String,
    /// The window (a concurrency limit: its holders' ttl), in ms.
    pub(super) window_ms: u64,
}

impl Target {
    /// A concurrency limit's state.
    pub(super) fn concurrency(&self) -> bool {
        matches!(self.item, StoreItem::Permits(_))
    }
}

/// The check of weight 0 an HTTP API query names, or the error naming the
/// parameter at fault.
pub(super) fn zero_check(q: &Query) -> Result<ValidCheck, String> {
    q.required("algorithm")?;
    let mut limit = serde_json::Map::new();
    limit.insert("key".into(), q.required("key")?.into());
    for field in LIMIT_FIELDS {
        let Some(text) = q.get(field) else { continue };
        let value: serde_json::Value = match field {
            "algorithm" => text.into(),
            _ => text
                .parse::<u64>()
                .map_err(|_| format!("{field}: expected a whole number, got {text:?}"))?
                .into(),
        };
        limit.insert(field.into(), value);
    }
    // A concurrency limit takes at least 1 in a check: parsed so, read at
    // 0 by `http_target`.
    let hits = u64::from(q.get("algorithm") == Some("concurrency"));
    let body = serde_json::json!({
        "domain": q.required("domain")?,
        "hits": hits,
        "holder": 0,
        "limits": [limit],
    });
    let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    // The check's field paths, renamed to the query's parameters.
    parse_check(&bytes).map_err(|e| e.to_string().replace("limits[0].", ""))
}

/// The state of the first limit of `check` (overrides applied).
pub(super) fn http_target(mut check: ValidCheck, q: &Query) -> Option<Target> {
    let kl = check.limits.pop()?;
    let domain = &check.domain;
    Some(match kl.rule {
        Rule::Rate(r) => Target {
            algorithm: r.limit.algorithm.name().to_string(),
            window_ms: r.limit.window / MILLISECOND,
            item: RateItem {
                block: r.block,
                ..RateItem::new(state_id(domain, &kl.key, &r.limit), r.limit, 0)
            }
            .into(),
        },
        Rule::Permits { permits, holder } => Target {
            algorithm: "concurrency".into(),
            window_ms: q
                .get("window_ms")
                .and_then(|w| w.parse().ok())
                .unwrap_or_default(),
            item: PermitItem {
                id: permits_id(domain, &kl.key),
                permits,
                holder,
                hits: 0,
            }
            .into(),
        },
    })
}

/// `text` with its `%XX` escapes decoded (as the RLS keys escape them).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The state of the RLS counter `key` of `domain`, its limit from the
/// descriptors.
pub(super) fn rls_target(config: &Descriptors, domain: &str, key: &str) -> Result<Target, String> {
    let tree = config
        .domains
        .get(domain)
        .ok_or_else(|| format!("domain: {domain:?} is not in the descriptors"))?;
    let entries: Vec<(String, String)> = key
        .split('/')
        .map(|entry| match entry.split_once(['=', '~']) {
            Some((k, v)) => (unescape(k), unescape(v)),
            None => (unescape(entry), String::new()),
        })
        .collect();
    let found = tree
        .lookup(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .ok_or_else(|| format!("key: {key:?} matches no descriptor with a limit"))?;
    match &found.rate_limit.action {
        Action::Limit(limit) => Ok(Target {
            algorithm: limit.algorithm.name().to_string(),
            window_ms: limit.window / MILLISECOND,
            item: StoreItem::new(
                state_id(&rls_scope(domain), &found.key, limit),
                limit.clone(),
                0,
            ),
        }),
        Action::Block | Action::Unlimited => Err(format!(
            "key: {key:?} has an unlimited or blocking limit, which keeps no state"
        )),
    }
}

/// Reads `item` at weight 0: a check of weight 0 reports a block in force
/// and never starts one.
pub(super) async fn read<S: Store>(store: &S, item: StoreItem) -> Result<Decision, StoreError> {
    let verdict = store.check(std::slice::from_ref(&item)).await?;
    verdict
        .decisions
        .first()
        .copied()
        .ok_or_else(|| StoreError::Protocol("no decision".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: path\n    value: /login\n    rate_limit: {unlimited: true}\n";

    #[test]
    fn an_rls_key_finds_its_limit_in_the_descriptors() {
        let config = Descriptors::parse(YAML).unwrap();
        let t = rls_target(&config, "shop", "remote_address=10.0.0.1").unwrap();
        assert_eq!(
            t.item.id(),
            "rls:shop/remote_address=10.0.0.1|fixed_window|1000"
        );
        assert_eq!((t.algorithm.as_str(), t.window_ms), ("fixed_window", 1000));
        let escaped = rls_target(&config, "shop", "remote_address=a%2Fb").unwrap();
        assert_eq!(
            escaped.item.id(),
            "rls:shop/remote_address=a%2Fb|fixed_window|1000"
        );
        assert_eq!(
            rls_target(&config, "shop", "path=%2Flogin").unwrap_err(),
            "key: \"path=%2Flogin\" has an unlimited or blocking limit, which keeps no state"
        );
        assert_eq!(
            rls_target(&config, "other", "k=v").unwrap_err(),
            "domain: \"other\" is not in the descriptors"
        );
        assert_eq!(
            rls_target(&config, "shop", "user=a").unwrap_err(),
            "key: \"user=a\" matches no descriptor with a limit"
        );
    }
}
