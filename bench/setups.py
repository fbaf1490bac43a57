"""What is measured: one row per configuration, and how to start its server.

Every Envoy row serves the same direct response ("ok\\n", 200) through the
listener the end-to-end tests use (tests/support); rows differ only in the
HTTP filters in front of it. Limits of the "allow" rows are far above what
one machine can send, so nothing is denied; the "deny" rows are floods that
are almost all denied.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

# tests/support: the algorithm list, Envoy, process and HTTP helpers shared with the tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import load  # noqa: E402
import support  # noqa: E402
from support import ALGORITHMS, jwt  # noqa: E402
from support.envoy import rlqs_filter  # noqa: E402
from support.rls import RLS_METHOD, rls_request_hex  # noqa: E402
from support.rls import REMOTE_ADDRESS, generic_key, ratelimit_filter  # noqa: E402

# Distinct client addresses for the "10,000 keys" rows.
MANY_KEYS = 10_000

# Nothing is denied: 100,000 requests/s per key, bursts of 1,000. A short
# window keeps the sliding log's state (4 bytes per request in the window)
# to the few hundred entries a busy client would really have, instead of a
# whole second of a flood.
ALLOW_LIMIT = {"requests": 1000, "window": "10ms"}
# A concurrency limit no load reaches: every request takes a permit and
# gives it back.
CONCURRENCY_LIMIT = {"concurrency": 1_000_000}
# A cost the response tells (a header the backend never sends: the estimate
# stands, counted missing): the reading and the settlement, without a charge.
RESPONSE_COST = {"cost": {"estimate": 1, "response": "header:x-usage-total"}}
# Counted by outcome: only 401s count (the rows' direct response is a 200).
OUTCOME = {"status": ["401"]}
# A penalty box: a key refused over its limit is refused for a minute.
BLOCK = {"on_exceed": "block", "block_for": "1m"}
# A flood of one key, almost all denied.
DENY_LIMIT = {"requests": 100, "window": "1s"}
# A flood of one key in delay mode: the schedule could hold a second's worth
# (100 requests), but each worker holds at most DELAY_MAX_QUEUED, fewer than
# wrk's connections on it, so its queue stays full and the other connections
# are denied at once (max_delay stays well under wrk's 2 s timeout).
DELAY_LIMIT = {**DENY_LIMIT, "on_exceed": "delay", "max_delay": "1s"}
DELAY_MAX_QUEUED = 4
# Many requests held at once: HELD connections on one key, each with one
# request in flight, against a limit of HELD per second without a burst that
# may hold up to 1.5 s' worth (more than HELD) in a queue larger than HELD.
# Every request but the first waits its turn, about a second (under wrk's 2 s
# timeout), and none is denied: about HELD requests wait at any moment, and
# the key is served at its rate.
HELD = 1000
HELD_LIMIT = {"algorithm": "gcra", "requests": HELD, "window": "1s", "burst": 1,
              "on_exceed": "delay", "max_delay": "1500ms"}
HELD_MAX_QUEUED = 2 * HELD
# Slots of the held rows' limit: keys that share a slot share a bucket, and
# without a burst two requests of one bucket a millisecond apart are delayed.
# With 10,000 other keys in this many slots, their sharing one with the held
# key, or pairs of them a millisecond apart, is rare (the default 100,000
# slots would give the held key a 10% chance).
HELD_MAX_KEYS = 10_000_000
# The share of a key's quota the leased global rows may hold: 10% of
# ALLOW_LIMIT's 1,000 requests, grants of up to 100 units.
LEASE_SHARE = "10%"
# Requests per renewal of the leases' floor row (`lease-calls`): half of a
# grant of that share.
LEASE_EVERY = 50
# The rule of every Sluice row (its counters are sluice.<rule>.<event>).
RULE = "per-ip"
# The limiter denies for an hour after 10 requests: the over-limit cache
# answers nearly everything.
CACHED_DENY_LIMIT = {"requests": 10, "window": "1h"}

LIMITER_CLUSTER = "sluice_limiter"

# The rate limit service rows: Envoy's own ratelimit filter and Sluice with
# `limiter.protocol: rls` ask the limiter over gRPC (`--grpc-listen`) for the
# same GCRA limit as the global rows, one descriptor per request: the one
# Sluice sends for RULE keyed by `client_ip` (generic_key = the rule's name,
# remote_address = the client), which Envoy's route actions build alike
# (`generic_key`, then `remote_address`, from the trusted X-Forwarded-For
# entry with `xff_num_trusted_hops: 1`).
RLS_DOMAIN = "bench"
# The rate limit quota row: Envoy's rate_limit_quota filter puts each
# X-Forwarded-For address in a bucket `{name: api, tenant: <address>}`
# (the descriptor `name=api, tenant=<address>`), decides in Envoy by the
# token bucket the limiter assigns (all that remains of the limit, refilled
# over the rest of its window) and reports usage every 5 s. A limit per hour
# far above what one machine sends: nothing is denied. Assignments live
# RLQS_TTL_MS, two of Envoy's 5 s reporting intervals.
RLQS_LIMIT = 1_000_000_000
RLQS_TTL_MS = 10_000
RLS_ACTIONS = [generic_key(RULE), REMOTE_ADDRESS]
# The limiter's descriptor file (envoyproxy/ratelimit's format, Sluice's
# `algorithm` and `window`): ALLOW_LIMIT under GCRA, as in the global rows.
RLS_DESCRIPTORS = f"""\
domain: {RLS_DOMAIN}
descriptors:
  - key: generic_key
    value: {RULE}
    descriptors:
      - key: remote_address
        rate_limit: {{requests_per_unit: {ALLOW_LIMIT['requests']}, window: {ALLOW_LIMIT['window']}, algorithm: gcra}}
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {{requests_per_unit: {RLQS_LIMIT}, unit: hour}}
"""
# Limitador's limits file for the same descriptor (its current condition
# syntax): a fixed window of whole seconds, so ALLOW_LIMIT's rate per second
# (100,000 per 1 s): nothing is denied either.
LIMITADOR_LIMITS = f"""\
- namespace: {RLS_DOMAIN}
  max_value: 100000
  seconds: 1
  conditions:
    - "descriptors[0].generic_key == '{RULE}'"
  variables:
    - descriptors[0].remote_address
"""

# One `RateLimitRequest` of the RLS rows' descriptor, in hex: what
# `sluice-load --grpc` sends to the limiters alone, Sluice's and Limitador's.
RLS_REQUEST_HEX = rls_request_hex(RLS_DOMAIN, [("generic_key", RULE), ("remote_address", "10.0.0.1")])

# Envoy's ratelimit filter applies route `rate_limits` only on a route with a
# route action, never on a `direct_response`. Its rows route to BACKEND_CLUSTER
# but answer before reaching it: the fault filter after the ratelimit filter
# aborts every request with a local 200 (body "fault filter abort"), as the
# direct response of the other rows does, with no upstream request. Nothing
# ever connects to the backend's address.
BACKEND_CLUSTER = {
    "name": "backend", "type": "STATIC", "connect_timeout": "1s",
    "load_assignment": {"cluster_name": "backend", "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 9}}}}]}]},
}
FAULT_REPLY = {
    "name": "envoy.filters.http.fault",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault",
        "abort": {"http_status": 200, "percentage": {"numerator": 100, "denominator": "HUNDRED"}},
    },
}
ROUTED_HCM = {
    "route_config": {"name": "local", "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
        {"match": {"prefix": "/"},
         "route": {"cluster": BACKEND_CLUSTER["name"], "rate_limits": [{"actions": RLS_ACTIONS}]}}]}]},
    "xff_num_trusted_hops": 1,
}


# The body wrk posts to the limiter: one GCRA key that never runs out.
LIMITER_CHECK_BODY = json.dumps({
    "domain": "bench", "hits": 1,
    "limits": [{"key": "per-ip/10.0.0.1", "algorithm": "gcra", "requests": 1000, "window_ms": 10}],
}, separators=(",", ":"))
# Limitador's HTTP API checked and counted (`POST /check_and_report`) for the
# same descriptor as the rate limit service rows: the first descriptor's
# entries are the `values` its limits file names.
LIMITADOR_CHECK_BODY = json.dumps({
    "namespace": RLS_DOMAIN, "delta": 1,
    "values": {"generic_key": RULE, "remote_address": "10.0.0.1"},
}, separators=(",", ":"))


@dataclass
class Row:
    """One configuration measured in the same run as the others.

    `kind` is "envoy" (wrk against Envoy) or "limiter" (wrk posting
    `check_body` to `check_path` of the row's store: sluice-limiter's
    /v1/check, or Limitador's HTTP API). `expect` is "allow" (no request may
    be denied), "undelayed" (none denied and, by Sluice's counters, none
    held) or "deny" (most requests must be). `default`: the row is in the
    default set (`make bench`); every row is in the full set.
    """

    id: str
    label: str
    kind: str = "envoy"
    keys: int = 1
    expect: str = "allow"
    store: str | None = None  # store a row needs: "memory", "redis", "limitador" or "limitador-redis"
    rls: bool = False  # whether the row calls the limiter over gRPC (RLS) rather than HTTP/JSON
    rlqs: bool = False  # whether the row reports to the limiter over RLQS (Envoy's rate_limit_quota filter)
    clusters: list = field(default_factory=list)  # Envoy clusters the row needs besides the limiter's
    filters: list = field(default_factory=list)
    hcm_extra: dict = field(default_factory=dict)
    connections: int | None = None  # wrk's connections, if not the usual ones (load.CONNECTIONS)
    first_key: int = 0  # index of the row's first X-Forwarded-For address (lua/keys.lua)
    beside: load.Beside | None = None  # a second load sent at the same time, not measured as the row's
    solo: bool = True  # whether the one-connection latency run means anything for the row
    counters: bool = False  # whether to report Sluice's counters of RULE (held, denied) per run
    default: bool = False  # whether the default set (`make bench`) measures the row
    check_path: str = "/v1/check"  # a limiter row's request
    check_body: str = LIMITER_CHECK_BODY

    def load_args(self) -> list[str]:
        """lua/keys.lua's arguments for the row's own load."""
        return [str(self.keys)] + ([str(self.first_key)] if self.first_key else [])


# jwt_authn verifying a bearer token that header_mutation adds to every
# request (wrk's requests stay the same): the source of a `jwt:` key part.
BEARER = {
    "name": "envoy.filters.http.header_mutation",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
        "mutations": {"request_mutations": [{"append": {
            "header": {"key": "authorization", "value": "Bearer " + jwt.token({"sub": "bench-client"}, ttl=86_400)},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}]},
    },
}

# Envoy's header_to_metadata copying X-Forwarded-For into dynamic metadata
# (namespace `bench`, key `client`): the source of a `metadata:` key part.
XFF_TO_METADATA = {
    "name": "envoy.filters.http.header_to_metadata",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
        "request_rules": [{"header": "x-forwarded-for", "on_header_present": {
            "metadata_namespace": "bench", "key": "client", "type": "STRING"}}],
    },
}


def sluice_config(limit: dict, headers: str | None = None, global_scope: bool = False,
                  rule: dict | None = None, top: dict | None = None, rls: bool = False,
                  before: list | None = None) -> dict:
    """A Sluice filter configuration: one rule keyed by client address (from a
    trusted X-Forwarded-For entry, as behind one proxy), one limit; the
    default headers unless `headers` is given; `rule` adds rule fields, `top`
    top-level fields; `rls`: the limiter is called with `protocol: rls`;
    `before`: rules ahead of it."""
    top = {"client_ip": {"xff_trusted_hops": 1}, **(top or {})}
    if rls:
        top["limiter"] = {"cluster": LIMITER_CLUSTER, "protocol": "rls", "timeout": "50ms"}
    elif global_scope:
        top["limiter"] = {"cluster": LIMITER_CLUSTER, "authority": "sluice-limiter", "timeout": "50ms"}
    return support.sluice_config([*(before or []), {"name": RULE, "key": ["client_ip"], "limits": [limit],
                                                    **(rule or {})}], domain="bench", headers=headers, **top)


# The rows of many rules: only the last rule matches the benchmark's requests
# (path `/`); the others are rules for other paths, `/svc<i>/`, each with
# a limit of its own. `envoy-1000-routes` gives Envoy's route table as many.
SOME_RULES, MANY_RULES = 100, 1000


def other_rules(n: int, limit: dict) -> list[dict]:
    """`n` rules keyed by client address, each for paths under `/svc<i>/`:
    none matches `/`."""
    return [{"name": f"svc-{i}", "key": ["client_ip"], "match": {"path_prefix": f"/svc{i}/"}, "limits": [limit]}
            for i in range(n)]


def many_routes(n: int) -> dict:
    """A route table of `n` routes of which only the last matches `/`: the
    listener's direct response for each, the others under `/svc<i>/`."""
    ok = {"status": 200, "body": {"inline_string": "ok\n"}}
    routes = [{"match": {"prefix": f"/svc{i}/"}, "direct_response": ok} for i in range(n - 1)]
    return {"route_config": {"name": "local", "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
        *routes, {"match": {"prefix": "/"}, "direct_response": ok}]}]}}


def unmatched_rules(n: int, limit: dict) -> list[dict]:
    """`n` rules of `limit` the bench's requests (`GET /`) never match, in turn a path
    prefix, an exact path with a method, and a prefix with methods and a
    header condition (the shapes of `benches/rules.rs`)."""
    shapes = [
        lambda i: {"path_prefix": f"/svc{i}/"},
        lambda i: {"path": f"/svc{i}/login", "methods": ["POST"]},
        lambda i: {"path_prefix": f"/svc{i}/", "methods": ["GET", "POST"],
                   "headers": [{"name": "x-tier", "exact": "free"}]},
    ]
    return [{"name": f"other-{i}", "match": shapes[i % 3](i), "key": ["client_ip"],
             "limits": [limit]} for i in range(n)]


def many_rules_config(limit: dict, n: int) -> dict:
    """`sluice_config(limit)` with its rule, matching `path_prefix: /`, the
    last of `n` rules."""
    cfg = sluice_config(limit, rule={"match": {"path_prefix": "/"}})
    cfg["rules"] = unmatched_rules(n - 1, limit) + cfg["rules"]
    return cfg


def sluice_counts(envoy: support.Envoy) -> dict[str, int]:
    """Sluice's counters of RULE in `envoy`: requests allowed (held ones
    included), held (delayed) and denied."""
    stats = envoy.stats()

    def get(event: str) -> int:
        for prefix in ("wasmcustom.", ""):
            if f"{prefix}sluice.{RULE}.{event}" in stats:
                return stats[f"{prefix}sluice.{RULE}.{event}"]
        return 0
    return {event: get(event) for event in ("allowed", "delayed", "denied")}


def native_local_ratelimit() -> dict:
    """Envoy's own token bucket, one dynamic descriptor per client address.

    The `remote_address` action yields the address Envoy trusts (the peer, or
    with `xff_num_trusted_hops` the X-Forwarded-For entry), and the wildcard
    descriptor value gives each address its own bucket, kept in an LRU of
    `max_dynamic_descriptors`. Buckets refill far faster than wrk can send.
    """
    huge = {"max_tokens": 1_000_000_000, "tokens_per_fill": 1_000_000_000, "fill_interval": "1s"}
    percent = {"default_value": {"numerator": 100, "denominator": "HUNDRED"}}
    return {
        "name": "envoy.filters.http.local_ratelimit",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
            "stat_prefix": "bench",
            "token_bucket": huge,
            "filter_enabled": {**percent, "runtime_key": "bench_enabled"},
            "filter_enforced": {**percent, "runtime_key": "bench_enforced"},
            "always_consume_default_token_bucket": False,
            "max_dynamic_descriptors": 2 * MANY_KEYS,
            "rate_limits": [{"actions": [{"remote_address": {}}]}],
            "descriptors": [{"entries": [{"key": "remote_address", "value": ""}], "token_bucket": huge}],
        },
    }


def rows(sluice_wasm: Path, noop_wasm: Path) -> list[Row]:
    """Every row, in the order of the report."""

    def sluice(cfg: dict) -> list:
        return [support.wasm_filter(cfg, sluice_wasm)]

    out = [
        Row("envoy", "Envoy, no rate-limit filter", default=True),
        Row(f"envoy-{MANY_RULES}-routes", f"Envoy, no rate-limit filter, {MANY_RULES:,} routes (the last matching)",
            hcm_extra=many_routes(MANY_RULES), default=True),
        Row("noop-wasm", "Envoy + no-op wasm filter", default=True,
            filters=[support.wasm_filter("{}", noop_wasm, vm_id="noop", name="noop")]),
        Row("pause-resume", "wasm filter pausing every request, resumed from the root context (1 ms tick)",
            default=True,
            filters=[support.wasm_filter({"mode": "pause"}, noop_wasm, vm_id="pause-resume", name="pause-resume")]),
        Row("host-calls", "wasm filter making Sluice's host calls, no logic", default=True,
            filters=[support.wasm_filter({"mode": "host_calls"}, noop_wasm, vm_id="host-calls", name="host-calls")]),
        Row("native", "Envoy local_ratelimit, one key", filters=[native_local_ratelimit()], default=True),
        Row("native-10k", "Envoy local_ratelimit, 10,000 keys", keys=MANY_KEYS,
            filters=[native_local_ratelimit()], hcm_extra={"xff_num_trusted_hops": 1}),
    ]
    for algo in ALGORITHMS:
        limit = {"algorithm": algo, **ALLOW_LIMIT}
        out.append(Row(f"local-{algo}", f"Sluice local {algo}, one key", filters=sluice(sluice_config(limit)),
                       default=algo == "gcra"))
        out.append(Row(f"local-{algo}-10k", f"Sluice local {algo}, 10,000 keys", keys=MANY_KEYS,
                       filters=sluice(sluice_config(limit))))
    gcra = {"algorithm": "gcra", **ALLOW_LIMIT}
    # The global rows: the same limit decided by the limiter, a call per
    # request (the default `sync`), coalesced (a worker's requests of one
    # key share the next call while one is in flight) or leased (the Envoy
    # spends grants of the key's quota, up to LEASE_SHARE of it, without
    # calling out).
    global_gcra = {**gcra, "scope": "global"}
    coalesced_gcra = {**global_gcra, "sync": {"mode": "coalesce"}}
    leased_gcra = {**global_gcra, "sync": {"mode": "lease", "max_share": LEASE_SHARE}}
    wide_leased_gcra = {**global_gcra, "sync": {"mode": "lease", "max_share": "100%"}}
    held_config = sluice_config(HELD_LIMIT, rule={"max_queued": HELD_MAX_QUEUED},
                                top={"local_max_keys": HELD_MAX_KEYS})
    out += [
        *(Row(f"local-gcra-{n}-rules", f"Sluice local gcra, one key, {n:,} rules (the last matching)",
              filters=sluice(sluice_config(gcra, before=other_rules(n - 1, gcra))), default=True)
          for n in (SOME_RULES, MANY_RULES)),
        Row("local-gcra-noheaders", "Sluice local gcra, one key, headers none",
            filters=sluice(sluice_config(gcra, headers="none"))),
        Row("local-gcra-appended", "Sluice local gcra, one key, envoy_xff appended",
            filters=sluice(sluice_config(gcra, top={"client_ip": {"xff_trusted_hops": 1,
                                                                  "envoy_xff": "appended"}}))),
        Row("local-gcra-soft", "Sluice local gcra, one key, soft_percent 20",
            filters=sluice(sluice_config({**gcra, "soft_percent": 20}))),
        # What reading a key from Envoy's context costs (a `jwt:` claim is a
        # metadata read too): the same filters in front, keyed by the
        # header or by the metadata another filter copied it into.
        Row("local-gcra-metadata-filter", "Sluice local gcra, one key, header_to_metadata in front, key by header",
            filters=[XFF_TO_METADATA, *sluice(sluice_config(gcra))]),
        Row("local-gcra-metadata-key", "Sluice local gcra, one key, key from dynamic metadata (a property read)",
            filters=[XFF_TO_METADATA, *sluice(sluice_config(gcra, rule={"key": ["metadata:bench:client"]}))]),
        Row("local-gcra-jwt-filter", "Sluice local gcra, one key, jwt_authn verifying a token in front, "
            "key by header", filters=[BEARER, jwt.jwt_authn(), *sluice(sluice_config(gcra))]),
        Row("local-gcra-jwt-claim", "Sluice local gcra, one key, key from the token's `sub` claim (a property read)",
            filters=[BEARER, jwt.jwt_authn(), *sluice(sluice_config(gcra, rule={"key": ["jwt:sub"]}))]),
        Row("local-gcra-path-prefix", "Sluice local gcra, one key, match path_prefix",
            filters=sluice(sluice_config(gcra, rule={"match": {"path_prefix": "/"}}))),
        Row("local-gcra-path-regex", "Sluice local gcra, one key, match path_regex",
            filters=sluice(sluice_config(gcra, rule={"match": {"path_regex": "/[a-z0-9/]*"}}))),
        # Matching through the rule index: the path_prefix row's rule last
        # among 100 or 1000 (see `unmatched_rules`).
        *(Row(f"local-gcra-rules-{n}", f"Sluice local gcra, one key, match path_prefix, the last of {n} rules",
              filters=sluice(many_rules_config(gcra, n))) for n in (100, 1000)),
        Row("local-deny", "Sluice local gcra, flood (429 path)", expect="deny",
            filters=sluice(sluice_config({"algorithm": "gcra", **DENY_LIMIT}))),
        # The same flood with the refused keys counted (top_limited_keys),
        # and with the key in the access log's filter state (hashed).
        Row("local-deny-topkeys", "Sluice local gcra, flood (429 path), top limited keys",
            expect="deny", filters=sluice(sluice_config(
                {"algorithm": "gcra", **DENY_LIMIT},
                top={"top_limited_keys": {"entries": 32, "path": "/sluice/top-limited"}}))),
        Row("local-deny-keylog", "Sluice local gcra, flood (429 path), the key hashed for the access log",
            expect="deny", filters=sluice(sluice_config(
                {"algorithm": "gcra", **DENY_LIMIT}, top={"access_log_key": "hashed"}))),
        Row("local-gcra-delay", f"Sluice local gcra, flood in delay mode ({DELAY_MAX_QUEUED} held per worker)",
            expect="deny", filters=sluice(sluice_config({"algorithm": "gcra", **DELAY_LIMIT},
                                                        rule={"max_queued": DELAY_MAX_QUEUED}))),
        Row("local-gcra-delay-held", f"Sluice local gcra, delay mode, {HELD:,} requests held "
            f"({HELD:,} connections on one key)", connections=HELD, solo=False, counters=True,
            filters=sluice(held_config)),
        Row("delay-others", "Sluice local gcra, delay mode, 10,000 keys never delayed",
            keys=MANY_KEYS, expect="undelayed", first_key=1, solo=False, counters=True, filters=sluice(held_config)),
        Row("delay-others-held", f"Sluice local gcra, delay mode, 10,000 keys never delayed, "
            f"beside {HELD:,} connections held on one key",
            keys=MANY_KEYS, first_key=1, solo=False, counters=True, filters=sluice(held_config),
            beside=load.Beside(HELD, "keys.lua", ["1"])),
        Row("deny-reply", "wasm filter making Sluice's host calls and 429 of a denial, no logic", expect="deny",
            filters=[support.wasm_filter({"mode": "deny"}, noop_wasm, vm_id="deny-reply", name="deny-reply")]),
        Row("global-memory", "Sluice global gcra, one key, a call per request, limiter memory store", store="memory",
            filters=sluice(sluice_config(global_gcra, global_scope=True)), default=True),
        Row("global-memory-coalesce", "Sluice global gcra, one key, coalesced calls, limiter memory store",
            store="memory", filters=sluice(sluice_config(coalesced_gcra, global_scope=True)), default=True),
        Row("global-memory-lease", f"Sluice global gcra, one key, leased ({LEASE_SHARE} share), limiter memory store",
            store="memory", filters=sluice(sluice_config(leased_gcra, global_scope=True)), default=True),
        # The same lease with a share that covers one Envoy's rate: asks are
        # rare, so the row measures spending from a lease.
        Row("global-memory-lease-wide", "Sluice global gcra, one key, leased (100% share), limiter memory store",
            store="memory", filters=sluice(sluice_config(wide_leased_gcra, global_scope=True)), default=True),
        # The floor of the leased rows: a local limit's host calls and a
        # renewal's call every LEASE_EVERY requests, sent by the root as
        # Sluice sends it, with no logic.
        Row("lease-calls", f"wasm filter making Sluice's host calls and a renewal call per {LEASE_EVERY} requests, "
            "no logic",
            store="memory",
            filters=[support.wasm_filter({"mode": "lease_calls", "cluster": LIMITER_CLUSTER,
                                          "authority": "sluice-limiter", "every": LEASE_EVERY},
                                         noop_wasm, vm_id="lease-calls", name="lease-calls")], default=True),
        Row("global-memory-coalesce-10k", "Sluice global gcra, 10,000 keys, coalesced calls, limiter memory store",
            keys=MANY_KEYS, store="memory", filters=sluice(sluice_config(coalesced_gcra, global_scope=True))),
        Row("call-out", "wasm filter making one bare limiter call per request", store="memory",
            filters=[support.wasm_filter({"mode": "call_out", "cluster": LIMITER_CLUSTER,
                                          "authority": "sluice-limiter"},
                                         noop_wasm, vm_id="call-out", name="call-out")], default=True),
        Row("global-calls", "wasm filter making Sluice's host calls of a global check and the call, no logic",
            store="memory",
            filters=[support.wasm_filter({"mode": "global_calls", "cluster": LIMITER_CLUSTER,
                                          "authority": "sluice-limiter"},
                                         noop_wasm, vm_id="global-calls", name="global-calls")], default=True),
        Row("global-redis", "Sluice global gcra, one key, a call per request, limiter Redis store", store="redis",
            filters=sluice(sluice_config(global_gcra, global_scope=True)), default=True),
        Row("global-redis-coalesce", "Sluice global gcra, one key, coalesced calls, limiter Redis store",
            store="redis", filters=sluice(sluice_config(coalesced_gcra, global_scope=True))),
        Row("global-redis-lease", f"Sluice global gcra, one key, leased ({LEASE_SHARE} share), limiter Redis store",
            store="redis", filters=sluice(sluice_config(leased_gcra, global_scope=True)), default=True),
        Row("global-cached", "Sluice global gcra, flood (over-limit cache)", expect="deny", store="memory",
            filters=sluice(sluice_config({"algorithm": "gcra", **CACHED_DENY_LIMIT, "scope": "global"},
                                         global_scope=True))),
        Row("local-concurrency", "Sluice local concurrency, one key (a permit taken and given back per request)",
            filters=sluice(sluice_config(CONCURRENCY_LIMIT))),
        Row("local-gcra-response-cost", "Sluice local gcra, one key, cost from the response "
            "(headers read, settled at the end)", filters=sluice(sluice_config(gcra, rule=RESPONSE_COST))),
        # Charging by what happened, beside the plain rows above: a limit
        # counted by outcome (the direct response is a 200, never a 401: each
        # request's unit is reserved, then given back at the end; globally
        # a check and a refund per request), and a penalty box no request
        # reaches (what a block costs a key that is not blocked).
        Row("local-gcra-by-outcome", "Sluice local gcra, one key, counted by outcome (401s: reserved, given back)",
            filters=sluice(sluice_config({**gcra, "count_when": OUTCOME}))),
        Row("global-memory-by-outcome", "Sluice global gcra, one key, counted by outcome (a check and a refund "
            "per request), limiter memory store", store="memory",
            filters=sluice(sluice_config({**global_gcra, "count_when": OUTCOME}, global_scope=True))),
        Row("local-gcra-block", "Sluice local gcra, one key, penalty box (never blocked)",
            filters=sluice(sluice_config({**gcra, **BLOCK}))),
        Row("global-memory-block", "Sluice global gcra, one key, penalty box (never blocked), limiter memory store",
            store="memory", filters=sluice(sluice_config({**global_gcra, **BLOCK}, global_scope=True))),
        Row("local-deny-block", "Sluice local gcra, flood of a key in the penalty box (429 path)", expect="deny",
            filters=sluice(sluice_config({"algorithm": "gcra", **DENY_LIMIT, **BLOCK}))),
        Row("global-memory-concurrency", "Sluice global concurrency, one key, a check and a share of a give-back "
            "call per request, limiter memory store", store="memory",
            filters=sluice(sluice_config({**CONCURRENCY_LIMIT, "scope": "global"}, global_scope=True))),
        Row("limiter-memory", "sluice-limiter /v1/check, memory store", kind="limiter", store="memory",
            default=True),
        Row("limiter-redis", "sluice-limiter /v1/check, Redis store", kind="limiter", store="redis", default=True),
        # Limitador alone over its HTTP API, the same descriptor as its RLS rows
        # (never built here: skipped without a binary).
        Row("limitador-memory", "Limitador POST /check_and_report, memory storage", kind="limiter",
            store="limitador", check_path="/check_and_report", check_body=LIMITADOR_CHECK_BODY, default=True),
        Row("limitador-redis", "Limitador POST /check_and_report, Redis storage", kind="limiter",
            store="limitador-redis", check_path="/check_and_report", check_body=LIMITADOR_CHECK_BODY,
            default=True),
        # The same descriptor over gRPC (RLS `ShouldRateLimit`, sluice-load: wrk
        # speaks no HTTP/2), both services with memory storage.
        Row("limiter-rls-memory", "sluice-limiter RLS ShouldRateLimit (gRPC), memory store", kind="limiter",
            store="memory", rls=True, check_path=RLS_METHOD, check_body=RLS_REQUEST_HEX, default=True),
        Row("limitador-rls-memory", "Limitador RLS ShouldRateLimit (gRPC), memory storage", kind="limiter",
            store="limitador", rls=True, check_path=RLS_METHOD, check_body=RLS_REQUEST_HEX, default=True),
    ]
    # Other builds of the filter beside this one, in the same run: the
    # global, coalesced, leased and local rows with each wasm of
    # SLUICE_BASELINE_WASM (say, the last release; several paths separated
    # by `:`), for a before/after comparison that shares the run's noise; in
    # the default set too, so that `make bench` compares the builds.
    # The limit of each row of COMPARED, and whether it is global.
    compared = {"global-memory": (global_gcra, True), "global-memory-coalesce": (coalesced_gcra, True),
                "global-memory-lease": (leased_gcra, True), "local-gcra": (gcra, False)}
    # Each right after the row it repeats (and that row's earlier builds):
    # a pair compared round by round then shares the round's neighbours.
    for row_id, row, baseline in baseline_rows():
        limit, is_global = compared[row]
        after = max(i for i, r in enumerate(out) if r.id == row or r.id.startswith(row + "-baseline"))
        out.insert(after + 1, Row(row_id, f"{row} with {baseline.name}", default=True,
                                  store="memory" if is_global else None,
                                  filters=[support.wasm_filter(sluice_config(limit, global_scope=is_global),
                                                               baseline, vm_id="baseline", name="baseline")]))
    return out + rls_rows(sluice, noop_wasm)


# The rows measured again with each build of SLUICE_BASELINE_WASM.
COMPARED = ["global-memory", "global-memory-coalesce", "global-memory-lease", "local-gcra"]


def baseline_rows() -> list[tuple[str, str, Path]]:
    """(row id, the row it repeats, the build) of each row measured with a
    build of SLUICE_BASELINE_WASM: `<row>-baseline` for the first build,
    `-baseline2`, `-baseline3`... for the next."""
    return [(row + "-baseline" + (str(n + 1) if n else ""), row, wasm)
            for n, wasm in enumerate(baseline_wasms()) for row in COMPARED]


def baseline_wasms() -> list[Path]:
    """The builds of SLUICE_BASELINE_WASM (paths separated by `:`)."""
    return [Path(p) for p in os.environ.get("SLUICE_BASELINE_WASM", "").split(os.pathsep) if p]


def envoy_ratelimit() -> list:
    """Envoy's own ratelimit filter asking the limiter's cluster over gRPC
    (the same 50 ms timeout as Sluice's, failures admitted as Sluice's
    default, `X-RateLimit` headers on every answer as Sluice's `RateLimit`
    ones), then the fault filter's local 200."""
    return [ratelimit_filter(RLS_DOMAIN, cluster=LIMITER_CLUSTER, timeout="0.05s", x_ratelimit_headers=True),
            FAULT_REPLY]


def rls_rows(sluice, noop_wasm: Path) -> list[Row]:
    """The rate limit service rows: Envoy's ratelimit filter and Sluice with
    `protocol: rls`, both calling the limiter over gRPC per request, memory
    store and Redis; the bare gRPC call of a wasm filter (the floor of
    Sluice's rls rows); Envoy's ratelimit filter calling Limitador, memory and
    Redis storage (run only with a Limitador binary); and the answer path of
    Envoy's rows without the filter."""
    rls_config = sluice_config({"scope": "global"}, rls=True)
    out = [Row("envoy-rls-route", "Envoy, no rate-limit filter, routed and answered 200 by the fault filter "
               "(the envoy-rls rows' answer)", filters=[FAULT_REPLY], hcm_extra=ROUTED_HCM,
               clusters=[BACKEND_CLUSTER])]
    for store, name in (("memory", "memory store"), ("redis", "Redis store")):
        out += [
            Row(f"envoy-rls-{store}", f"Envoy ratelimit filter → sluice-limiter (gRPC), one key, limiter {name}",
                store=store, rls=True, filters=envoy_ratelimit(), hcm_extra=ROUTED_HCM, clusters=[BACKEND_CLUSTER]),
            Row(f"global-rls-{store}", f"Sluice global, protocol rls → sluice-limiter (gRPC), one key, a call "
                f"per request, limiter {name}", store=store, rls=True, filters=sluice(rls_config)),
        ]
    out.append(Row("grpc-call-out", "wasm filter making one bare gRPC ShouldRateLimit call per request "
                   "(limiter memory store)", store="memory", rls=True,
                   filters=[support.wasm_filter({"mode": "grpc_call_out", "cluster": LIMITER_CLUSTER},
                                                noop_wasm, vm_id="grpc-call-out", name="grpc-call-out")]))
    out.append(Row("rlqs-memory", "Envoy rate_limit_quota filter → sluice-limiter (RLQS), one bucket, decided "
                   "in Envoy, usage reported every 5 s, limiter memory store", store="memory", rlqs=True,
                   filters=[rlqs_filter(RLS_DOMAIN, header="x-forwarded-for", cluster=LIMITER_CLUSTER)]))
    out += [Row(f"envoy-{store}", f"Envoy ratelimit filter → Limitador (gRPC), one key, {name}", store=store,
                rls=True, filters=envoy_ratelimit(), hcm_extra=ROUTED_HCM, clusters=[BACKEND_CLUSTER], default=True)
            for store, name in (("limitador", "memory storage"), ("limitador-redis", "Redis storage"))]
    return out

