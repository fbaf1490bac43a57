"""The penalty box (`on_exceed: block`) end to end: a key refused over its
limit is refused until its block ends, with Retry-After saying when, then
let in as its limit allows; locally (every worker of an Envoy) and globally
(two Envoys, two limiters, one Redis)."""

from support import limiter_cluster, request, sluice_config, wait_until

# 3 per 3 s (a token a second), blocked 2 s once over: once the block ends
# the bucket has refilled, so the first request let in says it ended.
BOXED = {"algorithm": "token_bucket", "requests": 3, "window": "3s",
         "on_exceed": "block", "block_for": "2s"}


def rule(scope, name="login", **limit):
    return {"name": name, "key": ["header:x-user"], "limits": [{**BOXED, "scope": scope, **limit}]}


def global_config():
    return sluice_config([rule("global")], limiter={
        "cluster": "sluice_limiter", "authority": "sluice-limiter", "timeout": "5s",
        "failure_mode": "deny"})


def status_and_retry(port, user, path="/"):
    r = request(port, path, headers={"x-user": user})
    return r.status, r.header("retry-after")


def blocked_until_let_in(port, user):
    """Polls until the key is let in; returns what the refusals said."""
    seen = []

    def let_in():
        status, retry = status_and_retry(port, user)
        if status == 200:
            return True
        seen.append((status, retry))
        return False

    wait_until(let_in, timeout=10, what=f"{user} let in", interval=0.1)
    return seen


def exceed(port, user, path="/", retry="2"):
    assert [status_and_retry(port, user, path) for _ in range(3)] == [(200, None)] * 3
    assert status_and_retry(port, user, path) == (429, retry)


def test_a_local_block_refuses_the_key_on_every_worker_until_it_ends(envoy):
    minute = {**rule("local", "minute", block_for="1m"), "match": {"path_prefix": "/minute"}}
    login = {**rule("local"), "match": {"path_prefix": "/"}}
    e = envoy(sluice_config([minute, login]))
    exceed(e.port, "eve", "/minute", retry="60")
    # Keys blocked now, per rule: eve's block.
    wait_until(lambda: e.sluice_stat("sluice.minute.blocked_keys") == 1, what="eve's block gauged")
    exceed(e.port, "mallory")
    # New connections, spread over both workers: each refuses the key.
    refusals = blocked_until_let_in(e.port, "mallory")
    assert refusals, "refused while blocked"
    assert all(status == 429 and retry in ("1", "2") for status, retry in refusals), refusals
    assert status_and_retry(e.port, "alice")[0] == 200
    # Let in as the bucket allows: it refilled during the block.
    assert status_and_retry(e.port, "mallory")[0] == 200
    wait_until(lambda: e.sluice_stat("sluice.login.blocks_started") == 1, what="blocks counted")
    wait_until(lambda: e.sluice_stat("sluice.login.blocked") == len(refusals), what="refusals counted")


def test_a_global_block_from_one_envoy_is_refused_by_another_through_another_limiter(envoy, processes):
    redis = processes.redis()
    limiters = [processes.limiter(store=redis.url) for _ in range(2)]
    a, b = (envoy(global_config(), clusters=[limiter_cluster("sluice_limiter", [lim.port])])
            for lim in limiters)
    exceed(a.port, "mallory")
    refusals = blocked_until_let_in(b.port, "mallory")
    assert refusals, "refused by the other Envoy while blocked"
    assert all(status == 429 and retry in ("1", "2") for status, retry in refusals), refusals
    assert status_and_retry(b.port, "alice")[0] == 200
    # The first Envoy's cache held the key until the block ended too.
    assert status_and_retry(a.port, "mallory")[0] == 200
    assert sum(lim.metric("sluice_limiter_blocks_started_total") for lim in limiters) == 1
    assert limiters[1].metric("sluice_limiter_blocked_total") >= 1
