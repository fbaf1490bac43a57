//! `POST /v1/charge`: what requests really cost, known after their
//! responses: each rate limit charged more (possibly into debt, beyond its
//! quota) or given units back.
//!
//! ```text
//! POST /v1/check  {"domain":"llm","hits":2,"limits":[{"key":"t","algorithm":"token_bucket",
//!   "requests":10,"window_ms":1000}]}                      (admitted for an estimate of 2)
//! POST /v1/charge {"domain":"llm","limits":[{"key":"t","algorithm":"token_bucket",
//!   "requests":10,"window_ms":1000,"burst":10,"charge":15}]}   (the response cost 17)
//! 200 {"limits":[{"allowed":false,"limit":10,"remaining":0,"reset_ms":1700,"retry_after_ms":800}]}
//! ```
//!
//! Every limit is adjusted, each key on its own; the answer holds, per
//! limit and in order, what a query of the key says after the adjustment.

use crate::request::{push_str, push_u64, write_limit, CONCURRENCY};
use crate::validate::{build_limit, check_key, name_the_field};
use crate::MAX_WINDOW_MS;
use crate::{validate_domain, LimitResult, LimitSpec, MAX_BODY_BYTES, MAX_COUNT, MAX_LIMITS};
use serde::{Deserialize, Serialize};
use sluice_core::{Adjust, Algorithm, FieldError, Limit, MILLISECOND};
use std::borrow::Cow;

/// `POST /v1/charge` body: rate limits to charge or refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChargeRequest<'a> {
    /// The domain of the checks that admitted the requests.
    #[serde(borrow)]
    pub domain: Cow<'a, str>,
    /// The limits, each with its adjustment (1 to [`MAX_LIMITS`]).
    #[serde(borrow)]
    pub limits: Vec<ChargeLimit<'a>>,
    /// Refused: a charge carries its units per limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
    /// Refused: a charge is not a coalesced check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
}

/// One rate limit of a charge: the limit as its checks give it, and
/// exactly one of `charge` or `refund` (with `refund_age_ms`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChargeLimit<'a> {
    /// The key, as in the checks.
    #[serde(borrow)]
    pub key: Cow<'a, str>,
    /// The algorithm (any but `sliding_log` with `charge`; not
    /// `concurrency`).
    #[serde(borrow)]
    pub algorithm: Cow<'a, str>,
    /// Requests per window, as in the checks.
    pub requests: u64,
    /// The window in milliseconds, as in the checks.
    pub window_ms: u64,
    /// As in the checks; defaults to `requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// As in the checks (sliding window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<u32>,
    /// As in the checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_percent: Option<u32>,
    /// The limit's delay mode, as in its checks, so that the key's state
    /// reads as they read it (what they queue is kept); a charge itself
    /// never waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// Units consumed unconditionally (1 to [`MAX_COUNT`]), possibly
    /// beyond the quota (debt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charge: Option<u64>,
    /// Units given back (1 to [`MAX_COUNT`]), never making the limit more
    /// permissive than if they had not been consumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<u64>,
    /// How long ago the refunded units were consumed, in milliseconds (0
    /// to [`MAX_WINDOW_MS`]), on the limiter's clock; given with `refund`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_age_ms: Option<u64>,
    /// Refused: the units are `charge` or `refund`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
    /// Refused: leases are taken in checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// Refused: lease returns are given in checks (a refund here is `refund`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<u64>,
    /// Refused, with `returned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned_age_ms: Option<u64>,
}

/// `POST /v1/charge` answer: per limit, in order, the key after its
/// adjustment as a query sees it (`allowed`: one more unit would pass now;
/// in debt `remaining` is 0 and `retry_after_ms` says when a unit passes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeResponse {
    /// One result per limit of the body, in order.
    pub limits: Vec<LimitResult>,
}

/// A charge body that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidCharge {
    /// The domain.
    pub domain: String,
    /// The limits and their adjustments, in request order.
    pub limits: Vec<KeyedAdjust>,
}

/// One validated limit of a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedAdjust {
    /// The client key as sent.
    pub key: String,
    /// The rate limit.
    pub limit: Limit,
    /// What to do to it (a refund's age in nanoseconds).
    pub adjust: Adjust,
}

/// Parses and validates a `/v1/charge` body; every error names its field.
pub fn parse_charge(body: &[u8]) -> Result<ValidCharge, FieldError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(FieldError::at(
            "",
            format!("body exceeds {MAX_BODY_BYTES} bytes"),
        ));
    }
    match serde_json::from_slice::<ChargeRequest<'_>>(body) {
        Ok(req) => req.validate(),
        Err(plain) => Err(name_the_field::<ChargeRequest<'_>>(body, plain)),
    }
}

fn refused(field: &str, set: bool) -> Result<(), FieldError> {
    if set {
        return Err(FieldError::at(field, "not allowed in a charge"));
    }
    Ok(())
}

fn count(field: &str, n: u64) -> Result<u64, FieldError> {
    if n == 0 || n > MAX_COUNT {
        return Err(FieldError::at(
            field,
            format!("must be between 1 and {MAX_COUNT}"),
        ));
    }
    Ok(n)
}

impl ChargeRequest<'_> {
    /// Validates every field, naming the first bad one.
    pub fn validate(self) -> Result<ValidCharge, FieldError> {
        validate_domain(&self.domain).map_err(|m| FieldError::at("domain", m))?;
        refused("hits", self.hits.is_some())?;
        refused("batch", self.batch.is_some())?;
        if self.limits.is_empty() {
            return Err(FieldError::at("limits", "must hold at least one limit"));
        }
        if self.limits.len() > MAX_LIMITS {
            return Err(FieldError::at(
                "limits",
                format!("at most {MAX_LIMITS} limits per charge"),
            ));
        }
        let limits = self
            .limits
            .into_iter()
            .enumerate()
            .map(|(i, l)| l.validate().map_err(|e| e.under(&format!("limits[{i}]"))))
            .collect::<Result<_, _>>()?;
        Ok(ValidCharge {
            domain: self.domain.into_owned(),
            limits,
        })
    }

    /// This body's JSON, exactly as `serde_json::to_vec` writes it (see
    /// [`charge_json`]).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.domain.len().saturating_add(32));
        out.extend_from_slice(br#"{"domain":"#);
        push_str(&mut out, &self.domain);
        out.extend_from_slice(br#","limits":["#);
        for (i, l) in self.limits.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            l.write_json(&mut out);
        }
        out.push(b']');
        let refused = [
            (&br#","hits":"#[..], self.hits),
            (br#","batch":"#, self.batch.map(u64::from)),
        ];
        for (name, value) in refused {
            if let Some(value) = value {
                out.extend_from_slice(name);
                push_u64(&mut out, value);
            }
        }
        out.push(b'}');
        out
    }
}

impl<'a> ChargeLimit<'a> {
    /// The charge item of a check's limit `spec` with `adjust` (a refund's
    /// age in whole milliseconds, rounded up: older, so never giving back
    /// more), borrowing its strings. The check's weights, leases and
    /// returns are left out.
    pub fn new(spec: &'a LimitSpec<'_>, adjust: Adjust) -> Self {
        let (charge, refund, refund_age_ms) = match adjust {
            Adjust::Charge(n) => (Some(n), None, None),
            Adjust::Refund { cost, age } => (None, Some(cost), Some(age.div_ceil(MILLISECOND))),
        };
        ChargeLimit {
            key: Cow::Borrowed(spec.key.as_ref()),
            algorithm: Cow::Borrowed(spec.algorithm.as_ref()),
            requests: spec.requests,
            window_ms: spec.window_ms,
            burst: spec.burst,
            precision: spec.precision,
            soft_percent: spec.soft_percent,
            max_delay_ms: spec.max_delay_ms,
            charge,
            refund,
            refund_age_ms,
            hits: None,
            lease: None,
            returned: None,
            returned_age_ms: None,
        }
    }

    /// Validates one limit, naming the first bad field.
    fn validate(self) -> Result<KeyedAdjust, FieldError> {
        check_key(&self.key)?;
        refused("hits", self.hits.is_some())?;
        refused("lease", self.lease.is_some())?;
        refused("returned", self.returned.is_some())?;
        refused("returned_age_ms", self.returned_age_ms.is_some())?;
        if self.algorithm == CONCURRENCY {
            return Err(FieldError::at(
                "algorithm",
                "concurrency limits are not charged (their permits are given back with POST /v1/permits)",
            ));
        }
        let algorithm = self
            .algorithm
            .parse::<Algorithm>()
            .map_err(|e| FieldError::at("algorithm", e.to_string()))?;
        let limit = build_limit(
            algorithm,
            self.requests,
            self.window_ms,
            self.burst,
            self.precision,
            self.soft_percent,
            self.max_delay_ms,
        )?;
        let adjust = self.adjustment(algorithm)?;
        Ok(KeyedAdjust {
            key: self.key.into_owned(),
            limit,
            adjust,
        })
    }

    /// Exactly one of `charge` or `refund` with `refund_age_ms`.
    fn adjustment(&self, algorithm: Algorithm) -> Result<Adjust, FieldError> {
        match (self.charge, self.refund, self.refund_age_ms) {
            (Some(_), Some(_), _) => Err(FieldError::at(
                "refund",
                "not allowed with charge (one adjustment per limit)",
            )),
            (Some(_), None, Some(_)) => {
                Err(FieldError::at("refund_age_ms", "not allowed with charge"))
            }
            (Some(_), None, None) if !algorithm.carries_debt() => Err(FieldError::at(
                "algorithm",
                format!("{algorithm} cannot carry debt: it is not charged (refunds are)"),
            )),
            (Some(n), None, None) => Ok(Adjust::Charge(count("charge", n)?)),
            (None, Some(_), None) => Err(FieldError::at("refund_age_ms", "required with refund")),
            (None, None, Some(_)) => Err(FieldError::at("refund", "required with refund_age_ms")),
            (None, Some(n), Some(ms)) => {
                let cost = count("refund", n)?;
                if ms > MAX_WINDOW_MS {
                    return Err(FieldError::at(
                        "refund_age_ms",
                        format!("must be between 0 and {MAX_WINDOW_MS}"),
                    ));
                }
                let age = ms.saturating_mul(MILLISECOND);
                Ok(Adjust::Refund { cost, age })
            }
            (None, None, None) => Err(FieldError::at("charge", "required (or refund)")),
        }
    }

    /// Appends this limit's JSON, as serde_json writes it.
    fn write_json(&self, out: &mut Vec<u8>) {
        let optional = [
            (&br#","burst":"#[..], self.burst),
            (br#","precision":"#, self.precision.map(u64::from)),
            (br#","soft_percent":"#, self.soft_percent.map(u64::from)),
            (br#","max_delay_ms":"#, self.max_delay_ms),
            (br#","charge":"#, self.charge),
            (br#","refund":"#, self.refund),
            (br#","refund_age_ms":"#, self.refund_age_ms),
            (br#","hits":"#, self.hits),
            (br#","lease":"#, self.lease),
            (br#","returned":"#, self.returned),
            (br#","returned_age_ms":"#, self.returned_age_ms),
        ];
        let head = (&*self.key, &*self.algorithm, self.requests, self.window_ms);
        write_limit(out, head, &optional);
    }
}

/// The JSON of the [`ChargeRequest`] adjusting each check limit `spec` of
/// `items` by its [`Adjust`] (see [`ChargeLimit::new`]), exactly as
/// `serde_json::to_vec` writes it, written by hand for the filter.
pub fn charge_json(domain: &str, items: &[(&LimitSpec<'_>, Adjust)]) -> Vec<u8> {
    let capacity = items
        .iter()
        .fold(domain.len().saturating_add(32), |n, (s, _)| {
            n.saturating_add(s.key.len()).saturating_add(120)
        });
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(br#"{"domain":"#);
    push_str(&mut out, domain);
    out.extend_from_slice(br#","limits":["#);
    for (i, (spec, adjust)) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        ChargeLimit::new(spec, *adjust).write_json(&mut out);
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// The error of `body`, or of one limit with `body`'s fields when it
    /// starts with a comma.
    fn err(body: &str) -> String {
        let body = if body.starts_with(',') {
            one(body)
        } else {
            body.to_string()
        };
        parse_charge(body.as_bytes()).unwrap_err().to_string()
    }

    /// A body of one limit with `extra` fields.
    fn one(extra: &str) -> String {
        format!(
            r#"{{"domain":"d","limits":[{{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000{extra}}}]}}"#
        )
    }

    #[test]
    fn a_body_reads_into_adjustments() {
        let ok = parse_charge(
            br#"{"domain":"d","limits":[
                {"key":"a","algorithm":"token_bucket","requests":10,"window_ms":1000,"charge":25},
                {"key":"b","algorithm":"sliding_log","requests":5,"window_ms":60000,"burst":7,
                 "refund":3,"refund_age_ms":1500},
                {"key":"c","algorithm":"leaky_bucket","requests":5,"window_ms":1000,
                 "max_delay_ms":200,"charge":1}]}"#,
        )
        .unwrap();
        assert_eq!(ok.domain, "d");
        assert_eq!(ok.limits[0].adjust, Adjust::Charge(25));
        assert_eq!(
            ok.limits[1].adjust,
            Adjust::Refund {
                cost: 3,
                age: 1500 * MILLISECOND
            }
        );
        assert_eq!(ok.limits[1].limit.burst, 7);
        assert_eq!(ok.limits[2].limit.max_delay, Some(200 * MILLISECOND));
    }

    #[test]
    fn errors_name_the_field() {
        let range = format!("must be between 1 and {MAX_COUNT}");
        assert_eq!(err(&one("")), "limits[0].charge: required (or refund)");
        assert_eq!(err(r#","charge":0"#), format!("limits[0].charge: {range}"));
        assert_eq!(
            err(&format!(r#","charge":{}"#, MAX_COUNT + 1)),
            format!("limits[0].charge: {range}")
        );
        assert!(err(r#","charge":-1"#).starts_with("limits[0].charge: "));
        assert_eq!(
            err(r#","charge":1,"refund":1,"refund_age_ms":0"#),
            "limits[0].refund: not allowed with charge (one adjustment per limit)"
        );
        assert_eq!(
            err(r#","charge":1,"refund_age_ms":0"#),
            "limits[0].refund_age_ms: not allowed with charge"
        );
        assert_eq!(
            err(r#","refund":1"#),
            "limits[0].refund_age_ms: required with refund"
        );
        assert_eq!(
            err(r#","refund_age_ms":1"#),
            "limits[0].refund: required with refund_age_ms"
        );
        assert_eq!(
            err(r#","refund":0,"refund_age_ms":1"#),
            format!("limits[0].refund: {range}")
        );
        assert_eq!(
            err(&format!(
                r#","refund":1,"refund_age_ms":{}"#,
                MAX_WINDOW_MS + 1
            )),
            format!("limits[0].refund_age_ms: must be between 0 and {MAX_WINDOW_MS}")
        );
        for field in ["hits", "lease", "returned", "returned_age_ms"] {
            assert_eq!(
                err(&format!(r#","charge":1,"{field}":1"#)),
                format!("limits[0].{field}: not allowed in a charge")
            );
        }
        assert!(err(r#","charge":1,"other":1"#).contains("other"));
        assert!(err(r#","charge":1,"requests":0"#).contains("duplicate"));
        let log = r#"{"domain":"d","limits":[{"key":"k","algorithm":"sliding_log","requests":1,"window_ms":1,"charge":2}]}"#;
        assert_eq!(
            err(log),
            "limits[0].algorithm: sliding_log cannot carry debt: it is not charged (refunds are)"
        );
        let conc = r#"{"domain":"d","limits":[{"key":"k","algorithm":"concurrency","requests":1,"window_ms":1000,"charge":2}]}"#;
        assert!(err(conc).starts_with("limits[0].algorithm: concurrency limits are not charged"));
        let bad = r#"{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":0,"window_ms":1,"charge":2}]}"#;
        assert!(err(bad).starts_with("limits[0].requests: "));
        let empty_key = r#"{"domain":"d","limits":[{"key":"","algorithm":"gcra","requests":1,"window_ms":1,"charge":2}]}"#;
        assert_eq!(err(empty_key), "limits[0].key: must not be empty");
        assert_eq!(
            err(r#"{"domain":"d","limits":[]}"#),
            "limits: must hold at least one limit"
        );
        assert!(err(r#"{"domain":"a b","limits":[]}"#).starts_with("domain: "));
        let item = r#"{"key":"k","algorithm":"gcra","requests":1,"window_ms":1,"charge":2}"#;
        for (field, extra) in [("hits", r#","hits":2"#), ("batch", r#","batch":2"#)] {
            assert_eq!(
                err(&format!(r#"{{"domain":"d","limits":[{item}]{extra}}}"#)),
                format!("{field}: not allowed in a charge")
            );
        }
        let many = vec![item; MAX_LIMITS + 1].join(",");
        assert_eq!(
            err(&format!(r#"{{"domain":"d","limits":[{many}]}}"#)),
            format!("limits: at most {MAX_LIMITS} limits per charge")
        );
    }

    #[test]
    fn the_hand_written_json_is_serdes() {
        let mut rng = Rng(0x5eed_c4a6_9e00_0003);
        for _ in 0..3000 {
            let specs: Vec<(LimitSpec<'static>, Adjust)> = (0..rng.below(4))
                .map(|_| {
                    let spec = LimitSpec {
                        key: rng.text().into(),
                        algorithm: rng.text().into(),
                        requests: rng.number(),
                        window_ms: rng.number(),
                        burst: rng.option(),
                        precision: rng.option().map(|n| n as u32),
                        soft_percent: rng.option().map(|n| n as u32),
                        hits: rng.option(),
                        max_delay_ms: rng.option(),
                        lease: rng.option(),
                        returned: rng.option(),
                        returned_age_ms: rng.option(),
                        reserve: rng.option(),
                        block_ms: rng.option(),
                    };
                    let adjust = if rng.below(2) == 0 {
                        Adjust::Charge(rng.number())
                    } else {
                        Adjust::Refund {
                            cost: rng.number(),
                            age: rng.number(),
                        }
                    };
                    (spec, adjust)
                })
                .collect();
            let domain = rng.text();
            let request = ChargeRequest {
                domain: domain.as_str().into(),
                limits: specs.iter().map(|(s, a)| ChargeLimit::new(s, *a)).collect(),
                hits: None,
                batch: None,
            };
            let serde = String::from_utf8(serde_json::to_vec(&request).unwrap()).unwrap();
            let items: Vec<(&LimitSpec<'_>, Adjust)> = specs.iter().map(|(s, a)| (s, *a)).collect();
            assert_eq!(
                String::from_utf8(charge_json(&domain, &items)).unwrap(),
                serde
            );
            let refused = ChargeRequest {
                hits: rng.option(),
                batch: rng.option().map(|n| n as u32),
                ..request
            };
            assert_eq!(refused.to_json(), serde_json::to_vec(&refused).unwrap());
        }
        let spec = LimitSpec::new(
            "r/0/alice".into(),
            &Limit::new(Algorithm::TokenBucket, 10, sluice_core::SECOND).unwrap(),
        );
        let written = charge_json(
            "demo",
            &[
                (&spec, Adjust::Charge(25)),
                (
                    &spec,
                    Adjust::Refund {
                        cost: 3,
                        age: 1500 * MILLISECOND + 1,
                    },
                ),
            ],
        );
        assert_eq!(
            String::from_utf8(written.clone()).unwrap(),
            r#"{"domain":"demo","limits":[{"key":"r/0/alice","algorithm":"token_bucket","requests":10,"window_ms":1000,"burst":10,"charge":25},{"key":"r/0/alice","algorithm":"token_bucket","requests":10,"window_ms":1000,"burst":10,"refund":3,"refund_age_ms":1501}]}"#
        );
        let read = parse_charge(&written).unwrap();
        assert_eq!(read.limits[0].adjust, Adjust::Charge(25));
        assert_eq!(read.limits[1].limit, read.limits[0].limit);
    }
}
