"""The quota endpoint (`quota_endpoint`) end to end: a caller asks Envoy for
its own quotas and gets, from the filter itself, the figures its requests'
rate-limit headers carry; asking consumes nothing, locally or in the
limiter, and two Envoys sharing a global limit answer alike."""

import json
import time

from support import limiter_cluster, request, sluice_config, wait_until

HOUR = 3600
# Fixed windows of an hour: aligned to the hour, so a quota's reset_at is a
# whole hour whenever it is read.
PER_USER = {"name": "per-user", "key": ["header:x-user"],
            "limits": [{"algorithm": "fixed_window", "requests": 5, "window": "1h"}]}
WRITES = {"name": "writes", "match": {"path_prefix": "/api", "methods": ["POST"]}, "key": ["header:x-user"],
          "limits": [{"algorithm": "token_bucket", "requests": 2, "window": "1m"}]}
BOXED = {"name": "boxed", "match": {"path_prefix": "/login"}, "key": ["header:x-user"],
         "limits": [{"algorithm": "fixed_window", "requests": 2, "window": "1h",
                     "on_exceed": "block", "block_for": "10m"}]}
ENDPOINT = {"path": "/rate_limit"}


def local_config(*rules):
    return sluice_config(list(rules), quota_endpoint=ENDPOINT)


def global_config():
    rule = {**PER_USER, "name": "shared",
            "limits": [{**PER_USER["limits"][0], "scope": "global"}]}
    return sluice_config([rule], quota_endpoint=ENDPOINT, limiter={
        "cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s", "failure_mode": "deny"})


def ask(port, user, query="", method="GET"):
    """The quota endpoint's answer to `user`: status, headers and JSON body
    (None for a body that is not JSON)."""
    r = request(port, "/rate_limit" + query, method=method, headers={"x-user": user})
    try:
        body = json.loads(r.body)
    except ValueError:
        body = None
    return r.status, r.headers, body


def quotas(port, user, query=""):
    status, _, body = ask(port, user, query)
    assert status == 200, body
    return {q["name"]: q for q in body["limits"]}


def timed(call):
    """`call()`, with the whole seconds of the clock before and after it: a
    figure Envoy computed during the call was computed at one of them."""
    before = int(time.time())
    out = call()
    return out, range(before, int(time.time()) + 1)


def assert_headers_agree(response, seconds, quota):
    """The quota endpoint's `quota` says what `response`'s headers said:
    the same limit and remaining, and a reset ending at the same instant
    (the headers count from the request, `reset_at` is absolute)."""
    assert response.header("x-ratelimit-limit") == str(quota["limit"])
    assert response.header("x-ratelimit-remaining") == str(quota["remaining"])
    reset = int(response.header("x-ratelimit-reset"))
    assert quota["reset_at"] in {reset + s for s in seconds}, (reset, seconds, quota)
    assert response.header("ratelimit") == f'"{quota["name"]}";r={quota["remaining"]};t={reset}'


def test_a_local_quota_is_what_the_last_responses_headers_said(envoy):
    e = envoy(local_config(PER_USER, WRITES))
    for _ in range(2):
        assert request(e.port, "/x", headers={"x-user": "alice"}).status == 200
    last, seconds = timed(lambda: request(e.port, "/x", headers={"x-user": "alice"}))
    assert last.status == 200
    (answer, asked) = timed(lambda: quotas(e.port, "alice"))
    quota = answer["per-user"]
    assert_headers_agree(last, seconds, quota)
    assert quota["reset_at"] % HOUR == 0
    assert quota["reset_at"] - quota["reset"] in asked
    assert {k: quota[k] for k in ("rule", "scope", "algorithm", "limit", "remaining", "used", "window")} == {
        "rule": "per-user", "scope": "local", "algorithm": "fixed_window", "limit": 5, "remaining": 2,
        "used": 3, "window": HOUR}
    # Without a path named, every rule keyed by the caller is listed; with
    # one, the rules a request to that path and method would meet.
    assert set(answer) == {"per-user", "writes"}
    assert set(quotas(e.port, "alice", "?path=/x")) == {"per-user"}
    assert set(quotas(e.port, "alice", "?path=/api/orders")) == {"per-user"}
    named = quotas(e.port, "alice", "?path=/api/orders&method=POST")
    assert set(named) == {"per-user", "writes"}
    assert (named["writes"]["limit"], named["writes"]["remaining"]) == (2, 2)
    # Asking consumed nothing: the next request finds the quota the poll said.
    assert quotas(e.port, "alice")["per-user"]["remaining"] == 2
    assert request(e.port, "/x", headers={"x-user": "alice"}).header("x-ratelimit-remaining") == "1"
    # The polls were never requests of the rule.
    wait_until(lambda: e.sluice_stat("sluice.per-user.allowed") == 4, what="four requests counted")


def test_a_caller_who_never_came_has_its_full_quota_and_keeps_it(envoy):
    e = envoy(local_config(PER_USER))
    for _ in range(3):
        assert request(e.port, "/x", headers={"x-user": "alice"}).status == 200
    for _ in range(3):
        quota = quotas(e.port, "bob")["per-user"]
        assert (quota["limit"], quota["remaining"], quota["used"], quota["reset"]) == (5, 5, 0, 0)
    first = request(e.port, "/x", headers={"x-user": "bob"})
    assert first.header("x-ratelimit-remaining") == "4"


def test_a_blocked_caller_sees_its_block(envoy):
    e = envoy(local_config(PER_USER, BOXED))
    for _ in range(2):
        assert request(e.port, "/login", headers={"x-user": "eve"}).status == 200
    refused, seconds = timed(lambda: request(e.port, "/login", headers={"x-user": "eve"}))
    assert (refused.status, refused.header("retry-after")) == (429, "600")
    boxed = quotas(e.port, "eve", "?path=/login")["boxed"]
    assert boxed["remaining"] == 0
    # Epoch seconds, rounded up: the block has ended by then.
    assert boxed["blocked_until"] in range(seconds.start + 600, seconds.stop + 601)
    assert boxed["reset_at"] == boxed["blocked_until"]
    assert boxed["next"] == boxed["reset"] <= 600
    assert quotas(e.port, "eve")["boxed"] == quotas(e.port, "eve", "?path=/login")["boxed"]
    # A path the rule does not cover: not listed.
    assert "boxed" not in quotas(e.port, "eve", "?path=/x")


def test_methods_other_than_get_and_head_get_405(envoy):
    e = envoy(local_config(PER_USER))
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, body = ask(e.port, "alice", method=method)
        assert (status, headers.get("allow"), headers.get("content-type")) == (
            405, "GET, HEAD", "application/json"), method
        assert body == {"error": "method not allowed: GET or HEAD"}
    head = request(e.port, "/rate_limit", method="HEAD", headers={"x-user": "alice"})
    assert (head.status, head.header("content-type"), head.body) == (200, "application/json", b"")
    # Another path under it is an ordinary request, routed and counted.
    other = request(e.port, "/rate_limit/x", headers={"x-user": "alice"})
    assert (other.status, other.body, other.header("x-ratelimit-remaining")) == (200, b"ok\n", "4")


def test_two_envoys_sharing_a_global_limit_answer_alike_and_consume_nothing(envoy, processes):
    limiter = processes.limiter()
    a, b = (envoy(global_config(), clusters=[limiter_cluster("sluice_limiter", [limiter.port])])
            for _ in range(2))
    for port in (a.port, a.port, b.port):
        assert request(port, "/x", headers={"x-user": "alice"}).status == 200
    last, seconds = timed(lambda: request(b.port, "/x", headers={"x-user": "alice"}))
    from_a, from_b = quotas(a.port, "alice")["shared"], quotas(b.port, "alice")["shared"]
    # `reset` and `next` count from each poll; the rest is the same.
    same = ("scope", "algorithm", "limit", "remaining", "used", "reset_at", "window")
    assert {k: from_a[k] for k in same} == {k: from_b[k] for k in same}
    assert (from_a["scope"], from_a["limit"], from_a["remaining"], from_a["used"]) == ("global", 5, 1, 4)
    assert_headers_agree(last, seconds, from_a)
    assert from_a["reset_at"] % HOUR == 0
    # Asked again and again, through either Envoy: the one request left is
    # still there.
    for port in (a.port, b.port, a.port):
        assert quotas(port, "alice")["shared"]["remaining"] == 1
    assert quotas(b.port, "bob")["shared"]["remaining"] == 5
    assert request(a.port, "/x", headers={"x-user": "alice"}).header("x-ratelimit-remaining") == "0"
    assert request(b.port, "/x", headers={"x-user": "alice"}).status == 429
    assert quotas(a.port, "alice")["shared"]["remaining"] == 0


def test_a_global_block_is_answered_by_every_envoy(envoy, processes):
    """The Envoy that refused answers from its cache, which keeps the
    limiter's word that a block holds the key; the other asks the limiter
    with the limit's block, and the limiter reports the block in force (a
    check of weight 0 never starts one)."""
    limiter = processes.limiter()
    rule = {"name": "gbox", "key": ["header:x-user"],
            "limits": [{"algorithm": "fixed_window", "requests": 2, "window": "1h", "scope": "global",
                        "on_exceed": "block", "block_for": "10m"}]}
    cfg = sluice_config([rule], quota_endpoint=ENDPOINT, limiter={
        "cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s", "failure_mode": "deny"})
    a, b = (envoy(cfg, clusters=[limiter_cluster("sluice_limiter", [limiter.port])]) for _ in range(2))
    for _ in range(2):
        assert request(a.port, "/x", headers={"x-user": "eve"}).status == 200
    # Bob spends his quota through B; polls of his spent key start no block.
    for code in (200, 200):
        assert request(b.port, "/x", headers={"x-user": "bob"}).status == code
    for port in (a.port, b.port):
        spent = quotas(port, "bob")["gbox"]
        assert (spent["remaining"], "blocked_until" in spent) == (0, False), spent
    assert limiter.metric("sluice_limiter_blocks_started_total") == 0
    refused, seconds = timed(lambda: request(a.port, "/x", headers={"x-user": "eve"}))
    assert (refused.status, refused.header("retry-after")) == (429, "600")
    # The Envoy that refused caches the block: its answer is the block's.
    boxed = quotas(a.port, "eve")["gbox"]
    assert (boxed["limit"], boxed["remaining"]) == (2, 0)
    assert boxed["reset_at"] in range(seconds.start + 600, seconds.stop + 601)
    assert boxed["blocked_until"] == boxed["reset_at"], boxed
    assert boxed["next"] == boxed["reset"] <= 600
    # The other asks the limiter, which reports the block and its end.
    other = quotas(b.port, "eve")["gbox"]
    assert (other["limit"], other["remaining"]) == (2, 0)
    assert other["blocked_until"] in range(seconds.start + 600, seconds.stop + 601), other
    assert other["next"] == other["reset"] <= 600
    # Asking started nothing and took nothing: one block, and carol is whole.
    assert limiter.metric("sluice_limiter_blocks_started_total") == 1
    assert quotas(b.port, "carol")["gbox"]["remaining"] == 2
    assert request(b.port, "/x", headers={"x-user": "bob"}).status == 429
    assert limiter.metric("sluice_limiter_blocks_started_total") == 2
