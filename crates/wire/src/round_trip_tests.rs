//! What the filter writes for a check ([`CheckRequest`]) the limiter reads
//! back ([`parse_check`]) as it was meant.

use crate::request::{CheckRequest, LimitSpec};
use crate::{limiter_key, parse_check, Rule};
use sluice_core::{Algorithm, Limit, Permits, MILLISECOND, SECOND};

const PERMITS: Permits = Permits {
    max: 5,
    ttl: 30 * SECOND,
};

#[test]
fn a_concurrency_limit_goes_out_and_comes_back() {
    let sent = CheckRequest {
        domain: "demo".into(),
        hits: 2,
        limits: vec![
            LimitSpec::permits("r/0/alice".into(), &PERMITS),
            LimitSpec::new("r/1/alice".into(), &gcra()),
        ],
        batch: None,
        holder: Some(7),
    };
    let wire = String::from_utf8(sent.to_json()).unwrap();
    assert_eq!(
        wire,
        r#"{"domain":"demo","hits":2,"limits":[{"key":"r/0/alice","algorithm":"concurrency","requests":5,"window_ms":30000},{"key":"r/1/alice","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}],"holder":7}"#
    );
    let check = parse_check(wire.as_bytes()).unwrap();
    assert_eq!(
        check.limits[0].rule,
        Rule::Permits {
            permits: PERMITS,
            holder: 7
        }
    );
    assert_eq!(check.limits[0].hits, 2);
    assert_eq!(check.limits[1].limit(), Some(&gcra()));
}

fn gcra() -> Limit {
    Limit::new(Algorithm::Gcra, 100, 60 * SECOND)
        .unwrap()
        .with_burst(20)
}

#[test]
fn request_matches_the_contract() {
    let body = CheckRequest {
        domain: "demo".into(),
        hits: 1,
        limits: vec![LimitSpec::new(
            limiter_key("per-ip", 1, "203.0.113.7"),
            &gcra(),
        )],
        batch: None,
        holder: None,
    };
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        r#"{"domain":"demo","hits":1,"limits":[{"key":"per-ip/1/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}]}"#
    );
    let sliding = Limit {
        algorithm: Algorithm::SlidingWindow,
        precision: 4,
        ..gcra()
    };
    let wire = serde_json::to_string(&LimitSpec::new("r/0/k".into(), &sliding)).unwrap();
    assert!(wire.ends_with(r#""burst":20,"precision":4}"#), "{wire}");
    let delayed = gcra().with_max_delay(Some(1500 * MILLISECOND));
    let wire = serde_json::to_string(&LimitSpec::new("r/0/k".into(), &delayed)).unwrap();
    assert!(
        wire.ends_with(r#""burst":20,"max_delay_ms":1500}"#),
        "{wire}"
    );
    let weighed = LimitSpec {
        hits: Some(3),
        ..LimitSpec::new("r/0/k".into(), &gcra())
    };
    let wire = serde_json::to_string(&weighed).unwrap();
    assert!(wire.ends_with(r#""burst":20,"hits":3}"#), "{wire}");
    let soft = gcra().with_soft_percent(50);
    let wire = serde_json::to_string(&LimitSpec::new("r/0/k".into(), &soft)).unwrap();
    assert!(wire.ends_with(r#""burst":20,"soft_percent":50}"#), "{wire}");
    let leased = LimitSpec {
        lease: Some(50),
        returned: Some(7),
        returned_age_ms: Some(1200),
        ..LimitSpec::new("r/0/k".into(), &gcra())
    };
    let wire = serde_json::to_string(&leased).unwrap();
    assert!(
        wire.ends_with(r#""burst":20,"lease":50,"returned":7,"returned_age_ms":1200}"#),
        "{wire}"
    );
    let body = format!(r#"{{"domain":"d","limits":[{wire}]}}"#);
    let check = parse_check(body.as_bytes()).unwrap();
    let Rule::Rate(l) = &check.limits[0].rule else {
        panic!("a rate limit")
    };
    assert_eq!(
        (l.lease, l.returned, l.returned_age),
        (50, 7, 1200 * MILLISECOND)
    );
}

#[test]
fn what_the_filter_sends_the_limiter_reads_back() {
    let delayed = gcra().with_max_delay(Some(250 * MILLISECOND));
    let sent = CheckRequest {
        domain: "demo".into(),
        hits: 3,
        limits: vec![
            LimitSpec::new("r/0/alice".into(), &gcra()),
            LimitSpec {
                hits: Some(5),
                ..LimitSpec::new("r/1/alice".into(), &delayed)
            },
        ],
        batch: None,
        holder: None,
    };
    let bytes = serde_json::to_vec(&sent).unwrap();
    assert!(!String::from_utf8_lossy(&bytes).contains("batch"));
    let check = parse_check(&bytes).unwrap();
    assert_eq!((check.domain.as_str(), check.hits), ("demo", 3));
    assert_eq!(check.batch, None);
    let batched = CheckRequest {
        batch: Some(7),
        ..sent
    };
    let bytes = serde_json::to_vec(&batched).unwrap();
    assert!(String::from_utf8_lossy(&bytes).ends_with(r#","batch":7}"#));
    assert_eq!(parse_check(&bytes).unwrap().batch, Some(7));
    assert_eq!(check.limits[0].key, "r/0/alice");
    assert_eq!(
        (check.limits[0].limit(), check.limits[0].hits),
        (Some(&gcra()), 3)
    );
    assert_eq!(
        (check.limits[1].limit(), check.limits[1].hits),
        (Some(&delayed), 5)
    );
}
