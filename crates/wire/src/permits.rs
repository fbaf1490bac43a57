//! `POST /v1/permits`: a holder gives back the permits of concurrency
//! limits (`release`) and keeps the others alive (`renew`).
//!
//! ```text
//! POST /v1/permits
//! {"domain":"demo","holder":7,"ttl_ms":30000,"release":[{"key":"conc/0/alice","hits":1}],
//!   "renew":["conc/0/bob"]}
//! 200 {"released":["conc/0/alice"],"renewed":["conc/0/bob"]}
//! ```

use crate::request::{push_str, push_u64};
use crate::validate::{check_key, name_the_field, permits_ttl};
use crate::{validate_domain, MAX_BODY_BYTES, MAX_COUNT};
use serde::{Deserialize, Serialize};
use sluice_core::{FieldError, Holder, Nanos};
use std::borrow::Cow;
use std::collections::HashSet;

/// Most entries of `release`, and of `renew`, in one body.
pub const MAX_PERMIT_KEYS: usize = 1024;

/// `POST /v1/permits` body: one holder's permits, given back or renewed.
/// Releases are applied before renewals, all at one clock reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermitsRequest<'a> {
    /// The domain of the checks that took the permits.
    #[serde(borrow)]
    pub domain: Cow<'a, str>,
    /// The holder that took them (the checks' `holder`).
    pub holder: Holder,
    /// How long the renewed permits count from now, in milliseconds (1000
    /// to [`MAX_WINDOW_MS`](crate::MAX_WINDOW_MS)); the concurrency limits'
    /// `window_ms`.
    pub ttl_ms: u64,
    /// Permits to give back, per key (at most [`MAX_PERMIT_KEYS`], each key
    /// once): no more than the holder holds.
    #[serde(borrow, default)]
    pub release: Vec<PermitRelease<'a>>,
    /// Keys whose permits the holder keeps (at most [`MAX_PERMIT_KEYS`],
    /// each once): they count `ttl_ms` more.
    #[serde(default)]
    pub renew: Vec<Cow<'a, str>>,
}

/// Permits given back on one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermitRelease<'a> {
    /// The concurrency limit's key, as in the check.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// Units given back (1 to [`MAX_COUNT`]): the weight of the request
    /// that ended.
    pub hits: u64,
}

/// `POST /v1/permits` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitsResponse {
    /// The keys of `release` where the holder held permits and gave some
    /// back, in request order.
    pub released: Vec<String>,
    /// The keys of `renew` where the holder still held permits (after the
    /// releases) and they were renewed, in request order. A key missing
    /// here holds nothing of the holder's any more (expired or never
    /// taken).
    pub renewed: Vec<String>,
}

/// A permits body that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidPermits {
    /// The domain.
    pub domain: String,
    /// Whose permits.
    pub holder: Holder,
    /// How long renewed permits count from now.
    pub ttl: Nanos,
    /// Keys and units to give back, each key once, in request order.
    pub release: Vec<(String, u64)>,
    /// Keys to renew, each once, in request order.
    pub renew: Vec<String>,
}

/// Parses and validates a `/v1/permits` body; every error names its field.
pub fn parse_permits(body: &[u8]) -> Result<ValidPermits, FieldError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(FieldError::at(
            "",
            format!("body exceeds {MAX_BODY_BYTES} bytes"),
        ));
    }
    match serde_json::from_slice::<PermitsRequest<'_>>(body) {
        Ok(req) => req.validate(),
        Err(plain) => Err(name_the_field::<PermitsRequest<'_>>(body, plain)),
    }
}

/// Refuses a list longer than [`MAX_PERMIT_KEYS`] or naming a key twice.
fn distinct<'k>(
    field: &str,
    keys: impl Iterator<Item = &'k str>,
    len: usize,
) -> Result<(), FieldError> {
    if len > MAX_PERMIT_KEYS {
        return Err(FieldError::at(
            field,
            format!("at most {MAX_PERMIT_KEYS} entries"),
        ));
    }
    let mut seen = HashSet::with_capacity(len);
    for (i, key) in keys.enumerate() {
        check_key(key).map_err(|e| e.under(&format!("{field}[{i}]")))?;
        if !seen.insert(key) {
            return Err(FieldError::at(format!("{field}[{i}]"), "key listed twice"));
        }
    }
    Ok(())
}

impl PermitsRequest<'_> {
    /// Validates every field, naming the first bad one.
    pub fn validate(self) -> Result<ValidPermits, FieldError> {
        validate_domain(&self.domain).map_err(|m| FieldError::at("domain", m))?;
        let ttl = permits_ttl(self.ttl_ms).map_err(|m| FieldError::at("ttl_ms", m))?;
        let release_keys = self.release.iter().map(|r| r.key.as_ref());
        distinct("release", release_keys, self.release.len())?;
        if let Some(i) = self
            .release
            .iter()
            .position(|r| r.hits == 0 || r.hits > MAX_COUNT)
        {
            return Err(FieldError::at(
                format!("release[{i}].hits"),
                format!("must be between 1 and {MAX_COUNT}"),
            ));
        }
        // A renew entry is a bare key: its errors name the entry.
        distinct(
            "renew",
            self.renew.iter().map(AsRef::as_ref),
            self.renew.len(),
        )
        .map_err(|e| FieldError::at(e.path.trim_end_matches(".key"), e.message))?;
        Ok(ValidPermits {
            domain: self.domain.into_owned(),
            holder: self.holder,
            ttl,
            release: self
                .release
                .into_iter()
                .map(|r| (r.key.into_owned(), r.hits))
                .collect(),
            renew: self.renew.into_iter().map(Cow::into_owned).collect(),
        })
    }

    /// This body's JSON, exactly as `serde_json::to_vec` writes it: see
    /// [`permits_json`].
    pub fn to_json(&self) -> Vec<u8> {
        let release: Vec<(&str, u64)> = self
            .release
            .iter()
            .map(|r| (r.key.as_ref(), r.hits))
            .collect();
        let renew: Vec<&str> = self.renew.iter().map(AsRef::as_ref).collect();
        permits_json(&self.domain, self.holder, self.ttl_ms, &release, &renew)
    }
}

/// The JSON of the [`PermitsRequest`] with these fields, exactly as
/// `serde_json::to_vec` writes it (empty lists included), written by hand
/// for the filter.
pub fn permits_json(
    domain: &str,
    holder: Holder,
    ttl_ms: u64,
    release: &[(&str, u64)],
    renew: &[&str],
) -> Vec<u8> {
    let keys = release
        .iter()
        .map(|(k, _)| k.len().saturating_add(40))
        .chain(renew.iter().map(|k| k.len().saturating_add(4)))
        .fold(0usize, usize::saturating_add);
    let mut out = Vec::with_capacity(domain.len().saturating_add(80).saturating_add(keys));
    out.extend_from_slice(br#"{"domain":"#);
    push_str(&mut out, domain);
    out.extend_from_slice(br#","holder":"#);
    push_u64(&mut out, holder);
    out.extend_from_slice(br#","ttl_ms":"#);
    push_u64(&mut out, ttl_ms);
    out.extend_from_slice(br#","release":["#);
    for (i, (key, hits)) in release.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"key":"#);
        push_str(&mut out, key);
        out.extend_from_slice(br#","hits":"#);
        push_u64(&mut out, *hits);
        out.push(b'}');
    }
    out.extend_from_slice(br#"],"renew":["#);
    for (i, key) in renew.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_str(&mut out, key);
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;
    use crate::MAX_WINDOW_MS;
    use sluice_core::MILLISECOND;

    fn err(body: &str) -> String {
        parse_permits(body.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn a_body_reads_into_releases_and_renewals() {
        let ok = parse_permits(
            br#"{"domain":"d","holder":18446744073709551615,"ttl_ms":1000,
                "release":[{"key":"a","hits":2}],"renew":["a","b"]}"#,
        )
        .unwrap();
        assert_eq!(ok.holder, u64::MAX);
        assert_eq!(ok.ttl, 1000 * MILLISECOND);
        assert_eq!(ok.release, [("a".to_string(), 2)]);
        assert_eq!(ok.renew, ["a", "b"]);
        let bare = parse_permits(br#"{"domain":"d","holder":1,"ttl_ms":5000}"#).unwrap();
        assert!(bare.release.is_empty() && bare.renew.is_empty());
    }

    #[test]
    fn errors_name_the_field() {
        let body = |extra: &str| format!(r#"{{"domain":"d","holder":1,"ttl_ms":1000{extra}}}"#);
        assert!(err(r#"{"domain":"d","ttl_ms":1000}"#).contains("holder"));
        assert!(err(r#"{"domain":"d","holder":1}"#).contains("ttl_ms"));
        assert!(err(r#"{"domain":"d","holder":-1,"ttl_ms":1000}"#).starts_with("holder: "));
        assert!(err(r#"{"domain":"a b","holder":1,"ttl_ms":1000}"#).starts_with("domain: "));
        for ttl in [0, 999, MAX_WINDOW_MS + 1] {
            let e = err(&format!(r#"{{"domain":"d","holder":1,"ttl_ms":{ttl}}}"#));
            assert!(e.starts_with("ttl_ms: must be between 1000"), "{e}");
        }
        assert!(err(&body(r#","extra":1"#)).contains("extra"));
        assert!(err(&body(r#","release":[{"key":"a"}]"#)).starts_with("release[0]: "));
        assert!(err(&body(r#","release":[{"key":"a","hits":1,"x":1}]"#)).contains("x"));
        assert_eq!(
            err(&body(r#","release":[{"key":"a","hits":0}]"#)),
            format!("release[0].hits: must be between 1 and {MAX_COUNT}")
        );
        assert_eq!(
            err(&body(r#","release":[{"key":"","hits":1}]"#)),
            "release[0].key: must not be empty"
        );
        assert_eq!(
            err(&body(
                r#","release":[{"key":"a","hits":1},{"key":"a","hits":1}]"#
            )),
            "release[1]: key listed twice"
        );
        assert_eq!(
            err(&body(r#","renew":["a","b","a"]"#)),
            "renew[2]: key listed twice"
        );
        let long = "k".repeat(crate::MAX_KEY_BYTES + 1);
        assert!(err(&body(&format!(r#","renew":["{long}"]"#))).starts_with("renew[0]: longer"));
        let many: Vec<String> = (0..=MAX_PERMIT_KEYS).map(|i| format!("\"{i}\"")).collect();
        assert_eq!(
            err(&body(&format!(r#","renew":[{}]"#, many.join(",")))),
            format!("renew: at most {MAX_PERMIT_KEYS} entries")
        );
    }

    #[test]
    fn the_hand_written_json_is_serdes() {
        let mut rng = Rng(0x5eed_9e12_77aa_0002);
        for _ in 0..3000 {
            let release: Vec<(String, u64)> = (0..rng.below(4))
                .map(|_| (rng.text(), rng.number()))
                .collect();
            let renew: Vec<String> = (0..rng.below(4)).map(|_| rng.text()).collect();
            let request = PermitsRequest {
                domain: rng.text().into(),
                holder: rng.number(),
                ttl_ms: rng.number(),
                release: release
                    .iter()
                    .map(|(k, hits)| PermitRelease {
                        key: k.as_str().into(),
                        hits: *hits,
                    })
                    .collect(),
                renew: renew.iter().map(|k| k.as_str().into()).collect(),
            };
            let serde = serde_json::to_vec(&request).unwrap();
            assert_eq!(
                String::from_utf8(request.to_json()).unwrap(),
                String::from_utf8(serde).unwrap()
            );
        }
        let written = permits_json("demo", 7, 30_000, &[("c/0/a", 1)], &["c/0/b"]);
        assert_eq!(
            String::from_utf8(written.clone()).unwrap(),
            r#"{"domain":"demo","holder":7,"ttl_ms":30000,"release":[{"key":"c/0/a","hits":1}],"renew":["c/0/b"]}"#
        );
        assert_eq!(parse_permits(&written).unwrap().release[0].1, 1);
    }
}
