use super::*;
use crate::key::KeyPart;
use crate::matcher::{HeaderTest, PathMatch};
use sluice_core::{Algorithm, MILLISECOND, SECOND};

/// The descriptor of a limit the rate limit service holds.
fn descriptor(limit: &RuleLimit) -> &[Entry] {
    match &limit.kind {
        LimitKind::ServiceHeld(held) => &held.descriptor,
        other => panic!("{other:?}"),
    }
}

const FULL: &str = r#"{
  "domain": "demo",
  "headers": "both",
  "client_ip": { "xff_trusted_hops": 1, "ipv4_prefix": 24, "ipv6_prefix": 48 },
  "limiter": { "cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "250ms", "failure_mode": "deny" },
  "local_max_keys": 1000,
  "response": { "status": 503, "body": "slow down\n", "headers": { "Content-Type": "text/plain" } },
  "rules": [
    {
      "name": "per-ip",
      "match": { "path_prefix": "/api/", "methods": ["get", "POST"], "headers": [{ "name": "X-Tier", "exact": "free" }, { "name": "x-k", "present": true }] },
      "key": ["client_ip", "header:X-User"],
      "limits": [
        { "algorithm": "gcra", "requests": 100, "window": "1m", "burst": 20, "scope": "local" },
        { "algorithm": "sliding_window", "requests": 1000, "window": "1h", "scope": "global", "precision": 4 }
      ],
      "overrides": [ { "key": "203.0.113.7", "requests": 1000 }, { "key": "vip", "requests": 5, "window": "1s", "burst": 7, "limit": 1 } ],
      "mode": "shadow"
    }
  ]
}"#;

fn err(json: &str) -> FieldError {
    match parse(json.as_bytes()) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => e,
    }
}

fn with_rule(rule: &str) -> String {
    format!(r#"{{"domain":"d","rules":[{rule}]}}"#)
}

const LIMIT: &str = r#"{"algorithm":"fixed_window","requests":10,"window":"1s"}"#;

#[test]
fn compiles_the_full_example() {
    let plan = parse(FULL.as_bytes()).unwrap();
    assert_eq!(plan.domain, "demo");
    assert_eq!(plan.headers, HeadersMode::Both);
    assert_eq!(plan.client_ip.trusted_hops, 1);
    assert_eq!(plan.client_ip.ipv4_prefix, 24);
    assert_eq!(plan.client_ip.ipv6_prefix, 48);
    let limiter = plan.limiter.as_ref().unwrap();
    assert_eq!(limiter.timeout, 250 * MILLISECOND);
    assert_eq!(limiter.failure_mode, FailureMode::Deny);
    assert_eq!(plan.local_max_keys, 1000);
    assert_eq!(plan.response.status, 503);
    assert_eq!(
        plan.response.headers,
        vec![("content-type".to_string(), "text/plain".to_string())]
    );
    assert_eq!(plan.seed_key, "sluice/demo/seed");
    let rule = &plan.rules[0];
    assert!(rule.shadow);
    assert_eq!(rule.matcher.path, PathMatch::Prefix("/api/".into()));
    assert_eq!(rule.matcher.methods, vec!["GET", "POST"]);
    assert_eq!(rule.matcher.headers[0].name, "x-tier");
    assert_eq!(rule.matcher.headers[1].test, HeaderTest::Present);
    assert_eq!(
        rule.key,
        vec![KeyPart::ClientIp, KeyPart::Header("x-user".into())]
    );
    let gcra = &rule.limits[0];
    assert_eq!(
        (
            gcra.limit().algorithm,
            gcra.limit().requests,
            gcra.limit().burst
        ),
        (Algorithm::Gcra, 100, 20)
    );
    assert_eq!(gcra.limit().window, 60 * SECOND);
    assert!(
        matches!(&gcra.kind, LimitKind::Local(l) if &*l.state_prefix == "sluice/demo/per-ip/0/gcra/60000/")
    );
    let sw = &rule.limits[1];
    assert_eq!(sw.limit().precision, 4);
    assert_eq!(sw.limit().burst, 1000);
    assert_eq!(sw.deny_prefix(), Some("sluice/demo/per-ip/1/deny/"));
    assert!(!sw.is_local());
    // The first override replaces both limits, burst following its requests.
    let o0 = &gcra.overrides()[gcra.override_index("203.0.113.7").unwrap()];
    assert_eq!(
        (o0.limit.requests, o0.limit.burst, o0.limit.window),
        (1000, 1000, 60 * SECOND)
    );
    assert_eq!(
        &*o0.state_key,
        "sluice/demo/per-ip/0/gcra/60000/=203.0.113.7"
    );
    assert!(sw.override_index("203.0.113.7").is_some());
    // The second replaces only limit 1.
    assert!(gcra.override_index("vip").is_none());
    let o1 = &sw.overrides()[sw.override_index("vip").unwrap()];
    assert_eq!(
        (o1.limit.requests, o1.limit.burst, o1.limit.window),
        (5, 7, SECOND)
    );
}

/// Response headers come sorted by name as written, a repeated name
/// keeping its last value, then lowercased.
#[test]
fn response_headers_are_sorted_and_the_last_repeat_wins() {
    let json = r#"{"domain":"d","response":{"headers":{"b":"1","A":"2","a":"3","b":"4"}}}"#;
    let plan = parse(json.as_bytes()).unwrap();
    let pairs = [("a", "2"), ("a", "3"), ("b", "4")];
    let expected: Vec<(String, String)> = pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(plan.response.headers, expected);
}

#[test]
fn applies_defaults() {
    let plan = parse(
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT}]}}"#
        ))
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(plan.headers, HeadersMode::Ietf);
    assert_eq!(plan.client_ip, crate::client_ip::ClientIpPolicy::default());
    assert!(plan.limiter.is_none());
    assert_eq!(plan.local_max_keys, 100_000);
    assert_eq!(plan.response.status, 429);
    assert_eq!(plan.response.body, "rate limited\n");
    let rule = &plan.rules[0];
    assert!(!rule.shadow);
    assert_eq!(rule.matcher, crate::matcher::Matcher::any());
    assert_eq!(rule.limits[0].limit().burst, 10);
    let empty = parse(br#"{"domain":"d"}"#).unwrap();
    assert!(empty.rules.is_empty());
    let limiter = parse(br#"{"domain":"d","limiter":{"cluster":"c","authority":"a"}}"#).unwrap();
    let limiter = limiter.limiter.unwrap();
    assert_eq!(
        (limiter.timeout, limiter.failure_mode),
        (50 * MILLISECOND, FailureMode::Allow)
    );
}

#[test]
fn names_the_field_at_fault() {
    let cases: Vec<(String, &str)> = vec![
        (r#"{"domain":""}"#.into(), "domain"),
        (r#"{"domain":"my domain"}"#.into(), "domain"),
        (format!(r#"{{"domain":"{}"}}"#, "d".repeat(129)), "domain"),
        (
            r#"{"domain":"d","local_max_keys":0}"#.into(),
            "local_max_keys",
        ),
        (
            r#"{"domain":"d","local_max_keys":10000001}"#.into(),
            "local_max_keys",
        ),
        (
            r#"{"domain":"d","client_ip":{"ipv4_prefix":33}}"#.into(),
            "client_ip.ipv4_prefix",
        ),
        (
            r#"{"domain":"d","client_ip":{"ipv6_prefix":129}}"#.into(),
            "client_ip.ipv6_prefix",
        ),
        (
            r#"{"domain":"d","response":{"status":200}}"#.into(),
            "response.status",
        ),
        (
            r#"{"domain":"d","limiter":{"cluster":"c","authority":"a","timeout":"0ms"}}"#.into(),
            "limiter.timeout",
        ),
        (
            r#"{"domain":"d","limiter":{"cluster":"","authority":"a"}}"#.into(),
            "limiter.cluster",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"bad name","key":["path"],"limits":[{LIMIT}]}}"#
            )),
            "rules[0].name",
        ),
        (
            with_rule(&format!(r#"{{"name":"r","key":[],"limits":[{LIMIT}]}}"#)),
            "rules[0].key",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path","nope"],"limits":[{LIMIT}]}}"#
            )),
            "rules[0].key[1]",
        ),
        (
            with_rule(r#"{"name":"r","key":["path"],"limits":[]}"#),
            "rules[0].limits",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path"],"limits":[{LIMIT},{{"algorithm":"gcra","requests":1,"window":"0s"}}]}}"#
            )),
            "rules[0].limits[1].window",
        ),
        (
            with_rule(
                r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":0,"window":"1s"}]}"#,
            ),
            "rules[0].limits[0].requests",
        ),
        (
            with_rule(
                r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":1,"burst":0,"window":"1s"}]}"#,
            ),
            "rules[0].limits[0].burst",
        ),
        (
            with_rule(
                r#"{"name":"r","key":["path"],"limits":[{"algorithm":"magic","requests":1,"window":"1s"}]}"#,
            ),
            "rules[0].limits[0].algorithm",
        ),
        (
            with_rule(
                r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":1,"window":"1s","precision":2}]}"#,
            ),
            "rules[0].limits[0].precision",
        ),
        (
            with_rule(
                r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":1,"window":"1 s"}]}"#,
            ),
            "rules[0].limits[0].window",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","match":{{"path":"/a","path_prefix":"/"}},"key":["path"],"limits":[{LIMIT}]}}"#
            )),
            "rules[0].match",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","match":{{"headers":[{{"name":"x","exact":"a","present":true}}]}},"key":["path"],"limits":[{LIMIT}]}}"#
            )),
            "rules[0].match.headers[0]",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"overrides":[{{"key":"k","requests":0}}]}}"#
            )),
            "rules[0].overrides[0].requests",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"overrides":[{{"key":"k","requests":1,"limit":1}}]}}"#
            )),
            "rules[0].overrides[0].limit",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"overrides":[{{"key":"k","requests":1}},{{"key":"k","requests":2}}]}}"#
            )),
            "rules[0].overrides[1].key",
        ),
        (
            with_rule(
                r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":1,"window":"1s","scope":"global"}]}"#,
            ),
            "limiter",
        ),
        (
            format!(
                r#"{{"domain":"d","rules":[{{"name":"r","key":["path"],"limits":[{LIMIT}]}},{{"name":"r","key":["path"],"limits":[{LIMIT}]}}]}}"#
            ),
            "rules[1].name",
        ),
    ];
    for (json, path) in cases {
        let e = err(&json);
        assert_eq!(e.path, path, "{json}: {e}");
    }
    let e = err(&with_rule(&format!(
        r#"{{"name":"r","key":["path"],"limits":[{LIMIT},{{"algorithm":"gcra","requests":1,"window":"0s"}}]}}"#
    )));
    assert_eq!(
        e.to_string(),
        "rules[0].limits[1].window: must be at least 1ms"
    );
    let e = err(&with_rule(
        r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":1,"window":"1s","scope":"global"}]}"#,
    ));
    assert_eq!(
        e.to_string(),
        "limiter: required because rules[0].limits[0] has scope global"
    );
}

#[test]
fn serde_errors_carry_position() {
    let e = err(r#"{"domain":"d","colour":"blue"}"#);
    assert!(e.to_string().contains("unknown field `colour`"), "{e}");
    assert!(e.to_string().contains("line 1"), "{e}");
    let e = err(&with_rule(&format!(
        r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"extra":1}}"#
    )));
    assert!(e.to_string().contains("unknown field `extra`"), "{e}");
    let e = err(&with_rule(
        r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":-1,"window":"1s"}]}"#,
    ));
    assert!(e.to_string().contains("-1"), "{e}");
    assert_eq!(e.path, "rules[0].limits[0].requests");
    let e = err(r#"{"domain":"d","headers":"fancy"}"#);
    assert!(
        e.to_string()
            .starts_with("headers: unknown variant `fancy`"),
        "{e}"
    );
    let e = err(
        r#"{"domain":"d","rules":[{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","window":"1s"}]}]}"#,
    );
    assert_eq!(e.to_string(), "rules[0].limits[0].requests: required");
    assert!(parse(br#"{"domain":"d"} x"#).is_err());
    assert!(parse(b"").is_err());
    assert!(parse(b"{").is_err());
    assert!(parse(br#"{"rules":[]}"#).is_err());
}

#[test]
fn each_limit_finds_its_overrides_in_any_order() {
    let plan = parse(
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT},{LIMIT}],"overrides":[
                {{"key":"m","requests":1}},{{"key":"z","requests":2,"limit":1}},{{"key":"a","requests":3}},{{"key":"b","requests":4,"limit":0}}]}}"#
        ))
        .as_bytes(),
    )
    .unwrap();
    let requests = |limit: &RuleLimit, key: &str| {
        limit
            .override_index(key)
            .map(|i| limit.overrides()[i].limit.requests)
    };
    let (first, second) = (&plan.rules[0].limits[0], &plan.rules[0].limits[1]);
    assert_eq!(
        ["a", "b", "m", "z", "x"].map(|k| requests(first, k)),
        [Some(3), Some(4), Some(1), None, None]
    );
    assert_eq!(
        ["a", "b", "m", "z", "x"].map(|k| requests(second, k)),
        [Some(3), None, Some(1), Some(2), None]
    );
    assert_eq!(first.limit_for("b").requests, 4);
    assert_eq!(first.limit_for("x").requests, 10);
}

fn delay_limit(algorithm: &str, extra: &str) -> String {
    with_rule(&format!(
        r#"{{"name":"r","key":["path"],"limits":[{LIMIT},{{"algorithm":"{algorithm}","requests":10,"window":"1s"{extra}}}]}}"#
    ))
}

#[test]
fn delay_mode_sets_the_limits_max_delay() {
    for algorithm in ["gcra", "leaky_bucket"] {
        let json = delay_limit(algorithm, r#","on_exceed":"delay","max_delay":"750ms""#);
        let plan = parse(json.as_bytes()).unwrap();
        let rule = &plan.rules[0];
        assert_eq!(rule.limits[0].limit().max_delay, None);
        assert_eq!(rule.limits[1].limit().max_delay, Some(750 * MILLISECOND));
        assert_eq!(rule.max_queued, 1000);
    }
    let json = delay_limit("gcra", r#","on_exceed":"deny""#);
    assert_eq!(
        parse(json.as_bytes()).unwrap().rules[0].limits[1]
            .limit()
            .max_delay,
        None
    );
}

#[test]
fn overrides_keep_the_delay_mode() {
    let json = with_rule(
        r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1s","on_exceed":"delay","max_delay":"2s"}],"overrides":[{"key":"/vip","requests":100}]}"#,
    );
    let plan = parse(json.as_bytes()).unwrap();
    assert_eq!(
        plan.rules[0].limits[0].overrides()[0].limit.max_delay,
        Some(2 * SECOND)
    );
}

#[test]
fn refuses_bad_delay_settings_naming_the_field() {
    let cases = [
        (
            delay_limit("fixed_window", r#","on_exceed":"delay","max_delay":"1s""#),
            "rules[0].limits[1].on_exceed",
            "gcra and leaky_bucket only",
        ),
        (
            delay_limit("token_bucket", r#","on_exceed":"delay","max_delay":"1s""#),
            "rules[0].limits[1].on_exceed",
            "not token_bucket",
        ),
        (
            delay_limit("gcra", r#","on_exceed":"delay""#),
            "rules[0].limits[1].max_delay",
            "required with on_exceed: delay",
        ),
        (
            delay_limit("gcra", r#","max_delay":"1s""#),
            "rules[0].limits[1].max_delay",
            "only applies with on_exceed: delay",
        ),
        (
            delay_limit("gcra", r#","on_exceed":"delay","max_delay":"0ms""#),
            "rules[0].limits[1].max_delay",
            "at least 1ms",
        ),
        (
            delay_limit("gcra", r#","on_exceed":"delay","max_delay":"soon""#),
            "rules[0].limits[1].max_delay",
            "",
        ),
        (
            delay_limit("gcra", r#","on_exceed":"later""#),
            "rules[0].limits[1].on_exceed",
            "unknown variant `later`",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"max_queued":0}}"#
            )),
            "rules[0].max_queued",
            "between 1 and 100000",
        ),
        (
            with_rule(&format!(
                r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"max_queued":100001}}"#
            )),
            "rules[0].max_queued",
            "between 1 and 100000",
        ),
    ];
    for (json, path, message) in cases {
        let e = err(&json);
        assert_eq!(e.path, path, "{json}: {e}");
        assert!(e.message.contains(message), "{json}: {e}");
    }
}

#[test]
fn max_queued_is_read() {
    let json = with_rule(&format!(
        r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"max_queued":7}}"#
    ));
    assert_eq!(parse(json.as_bytes()).unwrap().rules[0].max_queued, 7);
}

#[test]
fn soft_percent_is_checked_and_kept_by_overrides() {
    let plan = parse(with_rule(
        r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1s","soft_percent":20}],
            "overrides":[{"key":"vip","requests":50}]}"#,
    ).as_bytes())
    .unwrap();
    let rule_limit = &plan.rules[0].limits[0];
    assert_eq!(rule_limit.limit().soft_percent, 20);
    assert_eq!(rule_limit.limit().soft_burst(), 12);
    assert_eq!(rule_limit.overrides()[0].limit.soft_percent, 20);
    assert_eq!(rule_limit.overrides()[0].limit.soft_burst(), 60);
    let default = parse(
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT}]}}"#
        ))
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(default.rules[0].limits[0].limit().soft_percent, 0);
    let e = err(&with_rule(&format!(
        r#"{{"name":"r","key":["path"],"limits":[{LIMIT},{{"algorithm":"gcra","requests":1,"window":"1s","soft_percent":1001}}]}}"#
    )));
    assert_eq!(
        e.to_string(),
        "rules[0].limits[1].soft_percent: must be between 0 and 1000, got 1001"
    );
    let e = err(&with_rule(
        r#"{"name":"r","key":["path"],"limits":[{"algorithm":"gcra","requests":1,"window":"1s","soft_percent":-5}]}"#,
    ));
    assert_eq!(e.path, "rules[0].limits[0].soft_percent", "{e}");
}

#[test]
fn cost_forms() {
    let cost = |cost: &str| {
        let json = with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT}],"cost":{cost}}}"#
        ));
        parse(json.as_bytes()).map(|p| p.rules[0].cost.clone())
    };
    assert_eq!(cost("3").unwrap(), Cost::Fixed(3));
    assert_eq!(cost("10").unwrap(), Cost::Fixed(10));
    assert_eq!(
        cost(r#""header:X-Cost""#).unwrap(),
        Cost::Header("x-cost".into())
    );
    let default = parse(
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT}]}}"#
        ))
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(default.rules[0].cost, Cost::Fixed(1));
    let message = |c: &str| cost(c).unwrap_err().to_string();
    assert_eq!(
        message("0"),
        "rules[0].cost: must be between 1 and 1000000000000, got 0"
    );
    assert_eq!(
        message("1000000000001"),
        "rules[0].cost: must be between 1 and 1000000000000, got 1000000000001"
    );
    for bad in [
        "-3",
        "2.5",
        r#""header:""#,
        r#""x-cost""#,
        r#""query:c""#,
        "true",
        "[1]",
    ] {
        let e = cost(bad).unwrap_err();
        assert_eq!(e.path, "rules[0].cost", "{bad}: {e}");
    }
    assert!(
        message("-3").contains(
            r#"must be an integer of at least 1, "header:NAME", "metadata:NAMESPACE:KEY" or {"estimate", "response"}, got -3"#
        ),
        "{}",
        message("-3")
    );
    assert!(message(r#""x-cost""#).contains(r#"got "x-cost""#));
}

#[test]
fn a_fixed_cost_above_some_limits_capacity_is_refused() {
    // Capacity: burst with the soft allowance (20 + 10% = 22 for the second limit).
    let rule = |cost: u64, overrides: &str| {
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"cost":{cost},"limits":[
                {{"algorithm":"gcra","requests":100,"window":"1s"}},
                {{"algorithm":"token_bucket","requests":5,"window":"1s","burst":20,"soft_percent":10}}],
                "overrides":[{overrides}]}}"#
        ))
    };
    assert!(parse(rule(22, "").as_bytes()).is_ok());
    assert_eq!(
        err(&rule(23, "")).to_string(),
        "rules[0].cost: 23 is more than rules[0].limits[1] can ever admit (22: its burst with the soft allowance)"
    );
    // An override is a limit too.
    assert_eq!(
        err(&rule(
            5,
            r#"{"key":"a","requests":50},{"key":"b","requests":4,"limit":1}"#
        ))
        .to_string(),
        "rules[0].cost: 5 is more than rules[0].overrides[1] can ever admit (4: its burst with the soft allowance)"
    );
    // The header form is decided per request.
    assert!(parse(
        with_rule(
            r#"{"name":"r","key":["path"],"cost":"header:x-cost","limits":[{"algorithm":"gcra","requests":1,"window":"1s"}]}"#
        )
        .as_bytes()
    )
    .is_ok());
}

fn elastic_config(limit_extra: &str, pool: &str) -> String {
    format!(
        r#"{{"domain":"d","limiter":{{"cluster":"c","authority":"a"}},"rules":[
            {{"name":"user","key":["header:x-user"],"limits":[{{"algorithm":"gcra","requests":10,"window":"1s","burst":4{limit_extra}}}]}},
            {pool}]}}"#
    )
}

const POOL: &str = r#"{"name":"spare","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s"}]}"#;

#[test]
fn elastic_limits_compile_their_extra_allowance_and_pool() {
    let plan =
        parse(elastic_config(r#","elastic":{"ceiling":25,"pool":"spare"}"#, POOL).as_bytes())
            .unwrap();
    let elastic = plan.rules[0].limits[0].elastic().unwrap();
    assert_eq!(elastic.pool, 1);
    // 15 more per second, the burst scaled alike (4 * 15 / 10).
    assert_eq!((elastic.extra.requests, elastic.extra.burst), (15, 6));
    assert_eq!(elastic.extra.window, SECOND);
    assert_eq!(&*elastic.place, "sluice/d/user+elastic/0/gcra/1000/");
    assert!(plan.rules[1].pool && !plan.rules[0].pool);
}

#[test]
fn bad_elastic_limits_are_refused_with_the_field_named() {
    let elastic =
        |ceiling: u64, pool: &str| format!(r#","elastic":{{"ceiling":{ceiling},"pool":"{pool}"}}"#);
    let cases: Vec<(String, &str, &str)> = vec![
        (
            elastic_config(&elastic(10, "spare"), POOL),
            "rules[0].limits[0].elastic.ceiling",
            "above the limit's requests (10)",
        ),
        (
            elastic_config(&elastic(20, "nope"), POOL),
            "rules[0].limits[0].elastic.pool",
            "no rule is named \"nope\"",
        ),
        (
            elastic_config(&elastic(20, "user"), POOL),
            "rules[0].limits[0].elastic.pool",
            "its own pool",
        ),
        (
            elastic_config(
                &elastic(20, "spare"),
                r#"{"name":"spare","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s","elastic":{"ceiling":60,"pool":"user"}}]}"#,
            ),
            "rules[0].limits[0].elastic.pool",
            "itself elastic",
        ),
        (
            elastic_config(
                &elastic(20, "spare"),
                r#"{"name":"spare","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s","scope":"global"}]}"#,
            ),
            "rules[0].limits[0].elastic.pool",
            "a local elastic limit needs a local pool",
        ),
        (
            elastic_config(
                &elastic(20, "spare"),
                r#"{"name":"spare","match":{"path":"/x"},"key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s"}]}"#,
            ),
            "rules[1].match",
            "never matched on its own",
        ),
        (
            elastic_config(
                &elastic(20, "spare"),
                r#"{"name":"spare","cost":2,"key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s"}]}"#,
            ),
            "rules[1].cost",
            "borrowing request's weight",
        ),
        (
            elastic_config(
                &elastic(20, "spare"),
                r#"{"name":"spare","mode":"shadow","key":["const:all"],"limits":[{"algorithm":"fixed_window","requests":50,"window":"1s"}]}"#,
            ),
            "rules[1].mode",
            "shadow",
        ),
        (
            elastic_config(
                &format!(
                    r#"{},"on_exceed":"delay","max_delay":"1s""#,
                    elastic(20, "spare")
                ),
                POOL,
            ),
            "rules[0].limits[0].elastic",
            "on_exceed: delay",
        ),
    ];
    for (json, path, message) in cases {
        let e = err(&json);
        assert_eq!(e.path, path, "{e}");
        assert!(e.message.contains(message), "{e}");
    }
    let shadow = with_rule(&format!(
        r#"{{"name":"s","mode":"shadow","key":["const:a"],"limits":[{{"algorithm":"gcra","requests":1,"window":"1s"{}}}]}}, {POOL}"#,
        elastic(2, "spare")
    ));
    assert_eq!(err(&shadow).path, "rules[0].limits[0].elastic");
    let overridden = with_rule(&format!(
        r#"{{"name":"o","key":["const:a"],"limits":[{{"algorithm":"gcra","requests":1,"window":"1s"{}}}],"overrides":[{{"key":"a","requests":5}}]}}, {POOL}"#,
        elastic(2, "spare")
    ));
    let e = err(&overridden);
    assert_eq!(e.path, "rules[0].overrides[0]", "{e}");
}

fn leased(sync: &str) -> String {
    format!(
        r#"{{"domain":"d","limiter":{{"cluster":"c","authority":"a"}},"rules":[
            {{"name":"r","key":["const:k"],"limits":[{{"algorithm":"gcra","requests":1000,"window":"1s","scope":"global","sync":{sync}}}]}}]}}"#
    )
}

#[test]
fn sync_modes_compile() {
    let plan =
        parse(leased(r#"{"mode":"lease","max_share":"2.5%","ttl":"200ms"}"#).as_bytes()).unwrap();
    let rule_limit = &plan.rules[0].limits[0];
    match &rule_limit.kind {
        LimitKind::Leased(LeasedLimit { policy, .. }) => {
            assert_eq!((policy.share_ppm, policy.ttl), (25_000, 200 * MILLISECOND));
            assert_eq!(policy.max_units(rule_limit.limit()), 25);
            assert_eq!(policy.prefix, "sluice/d/r/0/lease/");
        }
        other => panic!("{other:?}"),
    }
    let plan = parse(leased(r#"{"mode":"lease","max_share":"100%"}"#).as_bytes()).unwrap();
    assert!(
        matches!(&plan.rules[0].limits[0].kind, LimitKind::Leased(LeasedLimit { policy: p, .. }) if p.ttl == SECOND && p.share_ppm == 1_000_000)
    );
    let plan = parse(leased(r#"{"mode":"coalesce"}"#).as_bytes()).unwrap();
    assert!(matches!(
        plan.rules[0].limits[0].kind,
        LimitKind::Coalesced(_)
    ));
    let plan = parse(leased(r#"{"mode":"per_request"}"#).as_bytes()).unwrap();
    assert!(matches!(plan.rules[0].limits[0].kind, LimitKind::Global(_)));
}

#[test]
fn bad_sync_settings_are_refused_with_the_field_named() {
    for (sync, path) in [
        (r#"{"mode":"lease"}"#, "rules[0].limits[0].sync.max_share"),
        (
            r#"{"mode":"lease","max_share":"0.05%"}"#,
            "rules[0].limits[0].sync.max_share",
        ),
        (
            r#"{"mode":"lease","max_share":"1"}"#,
            "rules[0].limits[0].sync.max_share",
        ),
        (
            r#"{"mode":"lease","max_share":"0%"}"#,
            "rules[0].limits[0].sync.max_share",
        ),
        (
            r#"{"mode":"lease","max_share":"100.01%"}"#,
            "rules[0].limits[0].sync.max_share",
        ),
        (
            r#"{"mode":"lease","max_share":"1.00001%"}"#,
            "rules[0].limits[0].sync.max_share",
        ),
        (
            r#"{"mode":"lease","max_share":"-1%"}"#,
            "rules[0].limits[0].sync.max_share",
        ),
        (
            r#"{"mode":"lease","max_share":"1%","ttl":"0ms"}"#,
            "rules[0].limits[0].sync.ttl",
        ),
        (
            r#"{"mode":"coalesce","max_share":"1%"}"#,
            "rules[0].limits[0].sync",
        ),
        (r#"{"mode":"sometimes"}"#, "rules[0].limits[0].sync.mode"),
    ] {
        let e = err(&leased(sync));
        assert_eq!(e.path, path, "{sync}: {e}");
    }
    let local = r#"{"domain":"d","rules":[{"name":"r","key":["const:k"],"limits":[{"algorithm":"gcra","requests":10,"window":"1s","sync":{"mode":"coalesce"}}]}]}"#;
    assert_eq!(err(local).path, "rules[0].limits[0].sync");
    let shadow = leased(r#"{"mode":"lease","max_share":"1%"}"#)
        .replace(r#""key""#, r#""mode":"shadow","key""#);
    assert_eq!(err(&shadow).path, "rules[0].limits[0].sync.mode");
}

fn rls(rules: &str) -> String {
    format!(r#"{{"domain":"d","limiter":{{"cluster":"rls","protocol":"rls"}},"rules":[{rules}]}}"#)
}

#[test]
fn rls_limits_name_descriptors() {
    let plan = parse(
        rls(r#"{"name":"per-user","key":["client_ip","header:X-User"],"limits":[{"scope":"global"},
              {"scope":"global","descriptor":[{"key":"plan","value":"free"},{"key":"user","from":"header:x-user"}]},
              {"algorithm":"gcra","requests":5,"window":"1s"}]}"#)
        .as_bytes(),
    )
    .unwrap();
    let limiter = plan.limiter.as_ref().unwrap();
    assert_eq!(
        (limiter.protocol, limiter.authority.as_str()),
        (Protocol::Rls, "")
    );
    let limits = &plan.rules[0].limits;
    let fixed = |k: &str, v: &str| Entry {
        key: k.into(),
        value: EntryValue::Fixed(v.into()),
    };
    let part = |k: &str, p: &str| Entry {
        key: k.into(),
        value: EntryValue::Part(KeyPart::parse(p).unwrap()),
    };
    assert_eq!(
        descriptor(&limits[0]),
        [
            fixed("generic_key", "per-user"),
            part("remote_address", "client_ip"),
            part("x-user", "header:x-user")
        ]
    );
    assert_eq!(
        descriptor(&limits[1]),
        [fixed("plan", "free"), part("user", "header:x-user")]
    );
    // Local limits are the filter's own, whatever the protocol.
    assert!(limits[2].is_local());
    assert_eq!(limits[2].limit().requests, 5);
}

#[test]
fn bad_rls_settings_are_refused_with_the_field_named() {
    let global = |extra: &str| {
        rls(&format!(
            r#"{{"name":"r","key":["client_ip"],"limits":[{{"scope":"global"{extra}}}]}}"#
        ))
    };
    for (json, path) in [
        (global(r#","requests":10"#), "rules[0].limits[0].requests"),
        (global(r#","algorithm":"gcra""#), "rules[0].limits[0].algorithm"),
        (global(r#","sync":{"mode":"coalesce"}"#), "rules[0].limits[0].sync"),
        (global(r#","descriptor":[]"#), "rules[0].limits[0].descriptor"),
        (global(r#","descriptor":[{"key":"k"}]"#), "rules[0].limits[0].descriptor[0]"),
        (global(r#","descriptor":[{"key":"","value":"v"}]"#), "rules[0].limits[0].descriptor[0].key"),
        (global(r#","descriptor":[{"key":"k","from":"path"}]"#), "rules[0].limits[0].descriptor[0].from"),
        (global(r#","descriptor":[{"key":"k","from":"nonsense"}]"#), "rules[0].limits[0].descriptor[0].from"),
        (
            r#"{"domain":"d","limiter":{"cluster":"c","authority":"a"},"rules":[{"name":"r","key":["client_ip"],"limits":[{"scope":"global","algorithm":"gcra","requests":1,"window":"1s","descriptor":[{"key":"k","value":"v"}]}]}]}"#.to_string(),
            "rules[0].limits[0].descriptor",
        ),
        (
            r#"{"domain":"d","limiter":{"cluster":"rls","protocol":"rls","authority":"a"}}"#.to_string(),
            "limiter.authority",
        ),
        (r#"{"domain":"d","limiter":{"cluster":"c"}}"#.to_string(), "limiter.authority"),
        (
            rls(r#"{"name":"r","key":["client_ip"],"limits":[{"scope":"global"}],"overrides":[{"key":"1.2.3.4","requests":5}]}"#),
            "rules[0].overrides[0]",
        ),
    ] {
        let e = err(&json);
        assert_eq!(e.path, path, "{json}: {e}");
    }
}

#[test]
fn a_rule_name_has_no_dot() {
    let e = err(&with_rule(&format!(
        r#"{{"name":"a.b","key":["path"],"limits":[{LIMIT}]}}"#
    )));
    assert_eq!(e.path, "rules[0].name");
    assert!(e.message.contains("no '.'"), "{}", e.message);
}

#[test]
fn durations_take_envoy_decimal_seconds() {
    let plan = parse(
        with_rule(
            r#"{"name":"a","key":["path"],"limits":[{"algorithm":"gcra","requests":10,"window":"1.5s","on_exceed":"delay","max_delay":"0.25s"}]}"#,
        )
        .as_bytes(),
    )
    .unwrap();
    let limit = &plan.rules[0].limits[0].limit();
    assert_eq!(limit.window, 1_500 * MILLISECOND);
    assert_eq!(limit.max_delay, Some(250 * MILLISECOND));
}

#[test]
fn a_limit_may_name_itself_for_the_rate_limit_headers() {
    let named = r#"{"name":"hourly","algorithm":"fixed_window","requests":10,"window":"1h"}"#;
    let plan = parse(
        with_rule(&format!(
            r#"{{"name":"a","key":["path"],"limits":[{LIMIT},{named}]}}"#
        ))
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(plan.rules[0].limits[0].name, None);
    assert_eq!(plan.rules[0].limits[1].name.as_deref(), Some("hourly"));
    let bad = r#"{"name":"a b","algorithm":"fixed_window","requests":10,"window":"1h"}"#;
    let e = err(&with_rule(&format!(
        r#"{{"name":"a","key":["path"],"limits":[{bad}]}}"#
    )));
    assert_eq!(e.path, "rules[0].limits[0].name");
    // Names in the headers are distinct: a limit named like another rule.
    let clash = r#"{"name":"b","algorithm":"fixed_window","requests":10,"window":"1h"}"#;
    let e = err(&format!(
        r#"{{"domain":"d","rules":[{{"name":"a","key":["path"],"limits":[{LIMIT},{clash}]}},{{"name":"b","key":["path"],"limits":[{LIMIT}]}}]}}"#
    ));
    assert_eq!(e.path, "rules[1].name");
    let e = err(&format!(
        r#"{{"domain":"d","rules":[{{"name":"b","key":["path"],"limits":[{LIMIT}]}},{{"name":"a","key":["path"],"limits":[{LIMIT},{clash}]}}]}}"#
    ));
    assert_eq!(e.path, "rules[1].limits[1].name");
}

mod fuzz;
#[cfg(feature = "schema")]
mod key_part_pattern;
#[cfg(feature = "schema")]
mod schema_fields;

#[test]
fn service_headers_are_a_rate_limit_services_only() {
    let plan =
        parse(rls(r#"{"name":"r","key":["path"],"limits":[{"scope":"global"}]}"#).as_bytes())
            .unwrap();
    let limiter = plan.limiter.as_ref().unwrap();
    assert_eq!(limiter.service_headers, ServiceHeaders::Always);
    let denied =
        r#"{"domain":"d","limiter":{"cluster":"rls","protocol":"rls","service_headers":"denied"}}"#;
    let plan = parse(denied.as_bytes()).unwrap();
    assert_eq!(
        plan.limiter.as_ref().unwrap().service_headers,
        ServiceHeaders::Denied
    );
    let sluice =
        r#"{"domain":"d","limiter":{"cluster":"l","authority":"l","service_headers":"never"}}"#;
    assert_eq!(err(sluice).path, "limiter.service_headers");
    let bad = r#"{"domain":"d","limiter":{"cluster":"rls","protocol":"rls","service_headers":"sometimes"}}"#;
    assert_eq!(err(bad).path, "limiter.service_headers");
}

#[test]
fn headers_can_be_held_while_the_body_is_read() {
    let rule = r#"{"name":"r","key":["body:user"],"limits":[{"algorithm":"gcra","requests":10,"window":"1m"}]}"#;
    let held = format!(r#"{{"domain":"d","headers_while_reading_body":"hold","rules":[{rule}]}}"#);
    let plan = parse(held.as_bytes()).unwrap();
    assert_eq!(plan.request_body, RequestBody::Read(HeadersWhileBody::Hold));
    // Without a rule that reads the body, no request waits for it.
    let none = br#"{"domain":"d","headers_while_reading_body":"hold"}"#;
    assert_eq!(parse(none).unwrap().request_body, RequestBody::Unread);
    let bad = br#"{"domain":"d","headers_while_reading_body":"stop"}"#;
    assert_eq!(
        err(std::str::from_utf8(bad).unwrap()).path,
        "headers_while_reading_body"
    );
}

#[test]
fn a_body_key_part_makes_requests_wait_for_their_body_and_is_only_in_keys() {
    let limit = r#""limits":[{"algorithm":"gcra","requests":10,"window":"1m"}]"#;
    let plan = |rule: &str| parse(with_rule(rule).as_bytes());
    let keyed = plan(&format!(
        r#"{{"name":"r","key":["header:x-api-key",{{"part":"body:model","default":"none"}}],{limit}}}"#
    ))
    .unwrap();
    assert_eq!(
        keyed.request_body,
        RequestBody::Read(HeadersWhileBody::Forward)
    );
    let plain = plan(&format!(
        r#"{{"name":"r","key":["header:x-api-key"],{limit}}}"#
    ))
    .unwrap();
    assert_eq!(plain.request_body, RequestBody::Unread, "no body part");
    for (rule, path) in [
        (
            format!(
                r#"{{"name":"r","key":["path"],"match":{{"parts":[{{"part":"body:model","present":true}}]}},{limit}}}"#
            ),
            "rules[0].match.parts[0].part",
        ),
        (
            format!(
                r#"{{"name":"r","key":["path"],"priority":{{"from":"body:tier","classes":[{{"name":"a","share":50}}],"default":"a"}},{limit}}}"#
            ),
            "rules[0].priority.from",
        ),
        (
            format!(r#"{{"name":"r","key":["body:a..b"],{limit}}}"#),
            "rules[0].key[0]",
        ),
    ] {
        let e = plan(&rule).unwrap_err();
        assert_eq!(e.path, path, "{rule}: {e}");
    }
    let e = plan(&format!(
        r#"{{"name":"r","key":["path"],"match":{{"parts":[{{"part":"body:model","present":true}}]}},{limit}}}"#
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("a body: part is read only in a rule's key"),
        "{e}"
    );
}

#[test]
fn the_quota_endpoint_is_off_unless_given_and_its_path_is_checked() {
    let plan = parse(
        with_rule(&format!(
            r#"{{"name":"r","key":["path"],"limits":[{LIMIT}]}}"#
        ))
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(plan.quota_endpoint, None);
    let plan = parse(br#"{"domain":"d","quota_endpoint":{"path":"/rate_limit"}}"#).unwrap();
    assert_eq!(plan.quota_endpoint.as_deref(), Some("/rate_limit"));
    for bad in ["rate_limit", "", "/q?x=1", "/q#a"] {
        let e = err(&format!(
            r#"{{"domain":"d","quota_endpoint":{{"path":"{bad}"}}}}"#
        ));
        assert_eq!(e.path, "quota_endpoint.path", "{bad}");
    }
    let e = err(r#"{"domain":"d","quota_endpoint":{}}"#);
    assert_eq!(e.path, "quota_endpoint");
}

#[test]
fn top_limited_keys_and_the_access_log_key_are_off_unless_given_and_checked() {
    let plan = parse(br#"{"domain":"d"}"#).unwrap();
    assert_eq!(plan.top_limited_keys, None);
    assert_eq!(plan.access_log_key, None);
    let plan = parse(br#"{"domain":"d","top_limited_keys":{},"access_log_key":"clear"}"#).unwrap();
    assert_eq!(
        plan.top_limited_keys,
        Some(crate::config::TopLimitedKeys {
            entries: 32,
            keys: crate::config::KeyShown::Hashed,
            path: None,
        })
    );
    assert_eq!(plan.access_log_key, Some(crate::config::KeyShown::Clear));
    let plan = parse(
        br#"{"domain":"d","top_limited_keys":{"entries":8,"keys":"clear","path":"/sluice/top-limited"}}"#,
    )
    .unwrap();
    let top = plan.top_limited_keys.unwrap();
    assert_eq!(
        (top.entries, top.keys, top.path.as_deref()),
        (
            8,
            crate::config::KeyShown::Clear,
            Some("/sluice/top-limited")
        )
    );
    for (bad, path) in [
        (r#"{"entries":0}"#, "top_limited_keys.entries"),
        (r#"{"entries":257}"#, "top_limited_keys.entries"),
        (r#"{"path":"top"}"#, "top_limited_keys.path"),
        (r#"{"keys":"plain"}"#, "top_limited_keys.keys"),
    ] {
        let e = err(&format!(r#"{{"domain":"d","top_limited_keys":{bad}}}"#));
        assert_eq!(e.path, path, "{bad}");
    }
    assert_eq!(
        err(r#"{"domain":"d","access_log_key":"x"}"#).path,
        "access_log_key"
    );
}
